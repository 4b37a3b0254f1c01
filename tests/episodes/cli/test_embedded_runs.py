"""Embedded runs on a machine shared by two checkouts (issue 27), as users run them.

Each "checkout" is a directory of its own (its `.episodes/`); `episodes dev` and
`episodes run` are real subprocesses with real dev servers and workers. Measured
before: `make demo` in one checkout reused the other's server on 127.0.0.1:7233 and
the other's worker (same `episodes` queue) took its provisions.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from episodes.client.connect import connect
from episodes.client.devserver import free_port, port_open
from tests.conftest import ROOT
from tests.support.procs import wait_until
from tests.support.worker_procs import cli_env

pytestmark = pytest.mark.slow

CHAOS_HARNESS = ROOT / "tests" / "support" / "harnesses" / "chaos_harness.py"
WIDE = {"COLUMNS": "400"}  # rich wraps at 80 columns off a terminal


def spec_file(where: Path, name: str) -> Path:
    spec = {
        "name": name,
        "env": "script",
        "tasks": [{"id": t, "data": {"messages": ["x"], "expected": ["x"]}} for t in "ab"],
        "samples": 2,
        "harness": {"command": "{python} -m episodes.harness.reference.echo"},
    }
    path = where / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


async def episodes(cwd: Path, *args: str, timeout: float = 240) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "episodes.cli.main",
        *args,
        cwd=cwd,
        env=cli_env(**WIDE),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return proc.returncode or 0, out.decode(), err.decode()


class Dev:
    """`episodes dev` in a checkout directory, up once it prints its worker line."""

    def __init__(self, cwd: Path, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "episodes.cli.main", "dev", *args],
            cwd=cwd,
            env=cli_env(**WIDE),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self.err = ""
        ready = threading.Event()

        def read() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                self.lines.append(line.rstrip())
                if "Ctrl-C stops it" in line:
                    ready.set()
            ready.set()  # exited

        threading.Thread(target=read, daemon=True).start()
        ready.wait(180)
        if self.proc.poll() is not None or not any("Ctrl-C" in x for x in self.lines):
            self.stop()
            raise AssertionError(f"episodes dev did not start: {self.lines} {self.err}")

    def line(self, start: str) -> str:
        return next(x for x in self.lines if x.startswith(start))

    @property
    def address(self) -> str:
        return self.line("✓ dev server on ").split()[-1]

    @property
    def worker_id(self) -> str:
        return self.line("✓ worker ").split()[2]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        assert self.proc.stderr is not None
        self.err = self.proc.stderr.read()


@contextlib.contextmanager
def dev(cwd: Path, *args: str) -> Iterator[Dev]:
    d = Dev(cwd, *args)
    try:
        yield d
    finally:
        d.stop()


def results(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_run_beside_another_checkouts_dev_on_7233(tmp_path) -> None:
    """Checkout A's `episodes dev` holds 127.0.0.1:7233 (the old default of everyone);
    checkout B's `episodes run` and `episodes dev` keep off it."""
    if port_open("127.0.0.1", 7233) or port_open("127.0.0.1", 8233):
        pytest.skip("127.0.0.1:7233 or :8233 is in use on this machine")
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    spec = spec_file(b, "beside")
    with dev(a, "--port", "7233", "--viewer-port", "0") as first:
        assert first.address == "127.0.0.1:7233"
        code, out, err = await episodes(b, "run", str(spec), "--out", str(b / "r.jsonl"))
        assert code == 0, out + err
        done = results(b / "r.jsonl")
        assert len(done) == 4 and {r["termination"] for r in done} == {"env_done"}, done
        theirs = await connect(first.address, timeout_s=30)
        assert (await theirs.count_workflows()).count == 0, "B's episodes ran on A's server"
        # B's own `episodes dev` moves to free ports and says so.
        with dev(b, "--viewer-port", "0") as second:
            assert second.address != "127.0.0.1:7233"
        assert "7233 is taken by a server this checkout did not start" in second.err
        assert (await theirs.count_workflows()).count == 0
    # B's histories stayed in B's own database.
    assert (b / ".episodes" / "temporal.db").exists()


async def test_run_beside_this_checkouts_dev_runs_on_its_own_worker(tmp_path) -> None:
    """`episodes run` without an address in a checkout whose `episodes dev` is up uses
    that server (its histories, shown by `episodes dev`) but a queue and a worker of its
    own: the dev worker takes none of its episodes. And a taken viewer port is said."""
    from episodes.client.config import TemporalFlags, load_config

    spec = spec_file(tmp_path, "own-queue")
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    viewer = taken.getsockname()[1]
    port, ui = free_port(), free_port()
    try:
        with dev(
            tmp_path, "--port", str(port), "--ui-port", str(ui), "--viewer-port", str(viewer)
        ) as d:
            assert not d.line("✓ episodes viewer: ").endswith(f":{viewer}")
            code, out, err = await episodes(
                tmp_path, "run", str(spec), "--out", str(tmp_path / "r.jsonl")
            )
            assert code == 0, out + err
            assert len(results(tmp_path / "r.jsonl")) == 4
            client = await connect(d.address, timeout_s=30)
            ids = [w.id async for w in client.list_workflows("WorkflowType = 'EpisodeWorkflow'")]
            assert len(ids) == 4, "the run did not use this checkout's dev server"
            for wid in ids:
                handle = client.get_workflow_handle(wid)
                assert (await handle.describe()).task_queue.startswith("episodes-embedded-")
                history = await handle.fetch_history()
                who = [
                    e.activity_task_started_event_attributes.identity
                    for e in history.events
                    if e.HasField("activity_task_started_event_attributes")
                ]
                assert who and not any(d.worker_id in w for w in who), (wid, who)
            # Readers with no address find this checkout's server wherever it is.
            with contextlib.chdir(tmp_path):
                cfg = load_config(TemporalFlags(), {}, environ={})
                assert cfg.connect_config()["target_host"] == d.address
            view = subprocess.Popen(
                [sys.executable, "-m", "episodes.cli.main", "view", "--port", "0"],
                cwd=tmp_path,
                env=cli_env(**WIDE),
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            try:
                assert view.stdout is not None
                shown = view.stdout.readline()
            finally:
                view.terminate()
                view.wait(30)
            assert f"Temporal at {d.address}" in shown, shown
    finally:
        taken.close()
    assert f"viewer port {viewer} is taken" in d.err


async def test_dev_refuses_a_taken_port(tmp_path, dev_server) -> None:
    """A server this command did not start (here: the test session's) is not reused."""
    code, out, err = await episodes(
        tmp_path, "dev", "--port", str(dev_server.port), "--viewer-port", "0", timeout=120
    )
    assert code == 2, out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "taken by a server this command did not start" in lines[0], err
    assert "Traceback" not in out + err


def test_make_demo_passes_port() -> None:
    shown = subprocess.run(
        ["make", "-n", "demo", "PORT=7999"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "-m episodes.demo --port 7999" in shown


async def test_runs_of_one_checkout_share_no_server_and_a_rerun_goes_on(tmp_path) -> None:
    """One database has one server: a second run of the same checkout while the first
    holds it is one line (before: it reused the server and died with a traceback when
    the first ended). A run killed mid-way and run again goes on where it stopped: the
    new worker polls the checkout's queue, the one the left episodes wait on. The
    first run is mid-way by construction: task `a` ends, the others' harnesses hold
    their answer while the file `hold` exists (removed before the last run)."""
    hold = tmp_path / "hold"
    hold.write_text("")
    tasks = {t: [f"{t}:0" if t == "a" else f"{t}:0:held"] for t in "abcd"}
    spec = {
        "name": "held",
        "env": "script",
        "tasks": [{"id": t, "data": {"messages": m, "expected": m}} for t, m in tasks.items()],
        "harness": {
            "command": ["{python}", str(CHAOS_HARNESS), "log", f"hold={hold}"],
            "runtime": {"type": "subprocess", "isolation": "none"},  # it reads `hold`
        },
        "turn_timeout_s": 600,
        "worker_lost_timeout_s": 3,
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    first_out = tmp_path / "r1.jsonl"
    first = subprocess.Popen(
        [sys.executable, "-m", "episodes.cli.main", "run", str(path), "--out", str(first_out)],
        cwd=tmp_path,
        env=cli_env(**WIDE),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert wait_until(lambda: first_out.exists() and first_out.read_text(), 240)
        code, out, err = await episodes(tmp_path, "run", str(path), "--out", "r2.jsonl")
        assert code == 2, out + err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and f"(pid {first.pid})" in lines[0], err
    finally:
        first.kill()
        first.wait(30)
    assert [r["task_id"] for r in results(first_out)] == ["a"]  # it was stopped half-way
    hold.unlink()
    code, out, err = await episodes(tmp_path, "run", str(path), "--out", "r3.jsonl", timeout=600)
    assert code == 0, out + err
    assert sorted(r["task_id"] for r in results(tmp_path / "r3.jsonl")) == sorted(tasks)


async def test_an_embedded_run_keeps_worker_tracebacks_in_its_log(tmp_path) -> None:
    """A harness that cannot start: the terminal shows the summary's one line with the
    cause from its stderr, never the SDK's traceback per episode, which goes to the
    worker log the closing lines name."""
    spec = spec_file(tmp_path, "nomodule")
    data = yaml.safe_load(spec.read_text())
    data["harness"]["command"] = "{python} -c 'import requestsx'"
    spec.write_text(yaml.safe_dump(data))
    code, out, err = await episodes(tmp_path, "run", str(spec))
    assert code == 1, out + err
    assert "Traceback" not in out + err, err
    flat = " ".join(out.split())
    assert (
        "first error: harness exited before it sent 'ready' (exit code 1): "
        "ModuleNotFoundError: No module named 'requestsx'"
    ) in flat, out
    assert "worker log: .episodes/worker.log" in flat
    log = (tmp_path / ".episodes" / "worker.log").read_text()
    assert "Traceback" in log and "requestsx" in log


async def test_after_an_embedded_run_show_and_export_read_its_histories(tmp_path) -> None:
    """The run's server died with it: `show` (and `export`) with no address start this
    checkout's server on `.episodes/temporal.db` for themselves, instead of failing on
    127.0.0.1:7233; the run's closing lines name only commands that work."""
    spec = spec_file(tmp_path, "kept")
    code, out, err = await episodes(tmp_path, "run", str(spec))
    assert code == 0, out + err
    flat = " ".join(out.split())
    assert "histories kept in .episodes/: `episodes show ID`" in flat, out
    assert "Temporal UI: http" not in flat  # its server is gone with the run
    code, out, err = await episodes(tmp_path, "show", "kept.a.s0", "--json")
    assert code == 0, out + err
    assert json.loads(out)["result"]["termination"] == "env_done"
    assert "reading this checkout's histories" in err
    code, out, err = await episodes(tmp_path, "export", "kept", "--out", "x.jsonl")
    # The echo harness makes no model calls: export refuses in one line, but it read
    # the batch (four episodes found) from this checkout's histories.
    assert "4/4" in out and "no episode made model calls" in err, out + err
    assert not any(str(tmp_path) in " ".join(p.cmdline()) for p in _dev_servers())


def _dev_servers() -> list:
    import psutil

    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if "start-dev" in (proc.info["cmdline"] or []):
            found.append(proc)
    return found


async def test_show_with_nothing_to_read_says_what_to_do(tmp_path) -> None:
    if port_open("127.0.0.1", 7233):
        pytest.skip("127.0.0.1:7233 is in use on this machine")
    code, out, err = await episodes(tmp_path, "show", "nothing.a.s0", timeout=120)
    assert code == 2, out + err
    assert "cannot reach Temporal at 127.0.0.1:7233" in err
    assert "no .episodes/ here holds a run's histories" in " ".join(err.split())
    assert "Traceback" not in out + err
