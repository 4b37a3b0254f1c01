"""A user's own Ctrl-C during `episodes run` is a cancel (issue 27): one line, the running
episodes end `cancelled`, no tracebacks in the worker's log, and the next run of the
same batch does not count their re-runs as infrastructure retries."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
import uuid

import pytest

from episodes.client.batch.server import episode_ids, episodes_query
from episodes.types.io import EpisodeProgress
from episodes.types.results import EpisodeResult
from tests.conftest import ROOT
from tests.episodes.cli.test_cli import episodes, write_spec


def _spec(name: str, *, slow: bool) -> dict:
    env = (
        {"env": "tests.support.envs:Endless", "env_args": {"delay_s": 0.5}, "max_turns": 1000}
        if slow
        else {"env": "script", "max_turns": 10}
    )
    return {
        "name": name,
        "tasks": [
            {"id": "a", "data": {"messages": ["x"]}},
            {"id": "b", "data": {"messages": ["y"]}},
        ],
        "harness": {"command": "{python} -m episodes.harness.reference.echo"},
        "turn_timeout_s": 30,
        **env,
    }


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _tracebacks(records: list[logging.LogRecord]) -> list[str]:
    """Records at INFO or above that carry a traceback, or name a CancelledError."""
    found = []
    for r in records:
        if r.levelno < logging.INFO:
            continue
        text = r.getMessage()
        if r.exc_info or "CancelledError" in text or "Traceback" in text:
            found.append(f"{r.name}: {text} {r.exc_info[0] if r.exc_info else ''}")
    return found


def _ctrl_c_as_at_a_terminal() -> None:
    """The command's SIGINT as a terminal's foreground job has it. A suite started in
    the background by a shell without job control (`make test &`, `nohup ... &`) has
    SIGINT ignored, every child inherits that, and Python then keeps it ignored: the
    Ctrl-C never arrived and the test waited out its guard (seen in three such runs)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


async def _exit_within(proc: asyncio.subprocess.Process, hang_s: float) -> tuple[bytes, bytes]:
    """What the command printed once it exited; a hang guard (not a timing verdict: a
    loaded machine takes long), failing with what it had printed by then."""
    talk = asyncio.ensure_future(proc.communicate())
    done, _ = await asyncio.wait({talk}, timeout=hang_s)
    if not done:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGUSR1)  # the command prints its threads' stacks
            await asyncio.sleep(2)
        proc.kill()
        out, err = await talk
        pytest.fail(
            f"no exit {hang_s:.0f} s after Ctrl-C; it printed:\n{out.decode()}{err.decode()}"
        )
    return talk.result()


async def test_ctrl_c_is_a_cancel(tmp_path, dev_server, client, worker) -> None:
    name = f"intr-{uuid.uuid4().hex[:6]}"
    spec = write_spec(tmp_path, _spec(name, slow=True))
    args = ["run", str(spec), "--address", dev_server.address, "--task-queue", "episodes-test"]
    records = _Records()
    logging.getLogger().addHandler(records)
    proc = None
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "episodes.cli.main",
            *args,
            cwd=ROOT,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            preexec_fn=_ctrl_c_as_at_a_terminal,
        )
        # Both episodes started and turning before the user presses Ctrl-C.
        handles = []
        for _ in range(600):
            ids = await episode_ids(client, name)
            if len(ids) == 2:
                handles = [client.get_workflow_handle(i, result_type=EpisodeResult) for i in ids]
                states = [await h.query("progress", result_type=EpisodeProgress) for h in handles]
                if all(s.turns_done >= 1 for s in states):
                    break
            await asyncio.sleep(0.2)
        else:
            pytest.fail("the episodes never started")
        proc.send_signal(signal.SIGINT)
        out, err = await _exit_within(proc, 120)
        stdout, stderr = out.decode(), err.decode()
        assert proc.returncode == 130, stdout + stderr
        assert "Traceback" not in stdout + stderr
        lines = [line for line in stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and "interrupted" in lines[0], stderr
        assert "2 episodes cancelled" in lines[0], stderr
        results = [await asyncio.wait_for(h.result(), 60) for h in handles]
        assert [r.termination for r in results] == ["cancelled", "cancelled"]
        # The worker's log: a cancel is not an error.
        await asyncio.sleep(1)  # the releases' log lines
        assert _tracebacks(records.records) == []
    finally:
        logging.getLogger().removeHandler(records)
        if proc is not None and proc.returncode is None:
            proc.kill()
            await proc.wait()
        for wid in await episode_ids(client, name):  # a failed test leaves none running
            with contextlib.suppress(Exception):
                await client.get_workflow_handle(wid).terminate()

    # The same batch again (now quick): the cancelled episodes run again as `.r1`,
    # which is not an infrastructure retry, and the note says so (it used to call them
    # reused, not run again). Visibility is eventually consistent: wait until it shows.
    query = f"{episodes_query(name)} AND EpisodeTermination = 'cancelled'"
    for _ in range(300):
        if (await client.count_workflows(query)).count == 2:
            break
        await asyncio.sleep(0.1)
    write_spec(tmp_path, _spec(name, slow=False))
    code, stdout, stderr = await episodes(*args)
    assert code == 0, stdout + stderr
    said = " ".join(stderr.split())
    assert f"note: batch '{name}' (the spec's name) has 2 cancelled episodes that run again" in said
    assert "reused" not in said
    flat = " ".join(stdout.split())
    assert "retried as fresh episodes │ 0" in flat, stdout
    assert "cancelled" not in flat
