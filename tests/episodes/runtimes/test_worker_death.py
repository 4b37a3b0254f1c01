"""A worker killed with SIGKILL must not leave its harness processes behind."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.procs import assert_pids_gone, descendants, pid_running, scripted

ROOT = Path(__file__).resolve().parents[3]

# The "worker": opens a harness through the real runtime and session, answers one
# turn, reports the pids, then idles until it is killed.
WORKER = textwrap.dedent(
    """
    import asyncio, json, sys
    from episodes.harness import NativeDriver
    from episodes.runtimes.subprocess import SubprocessRuntime

    async def main(argv):
        runtime = SubprocessRuntime()
        await runtime.start()
        session = NativeDriver(runtime, argv, ready_timeout_s=10)
        await session.start()
        record = await session.turn(1, "ping", timeout_s=10)
        report = {"harness": session.pid, "reply": record.reply, "workdir": runtime.workdir}
        print(json.dumps(report), flush=True)
        await asyncio.sleep(3600)

    asyncio.run(main(json.loads(sys.argv[1])))
    """
)


def run_worker(harness_argv: list[str]) -> tuple[subprocess.Popen, dict]:
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER, json.dumps(harness_argv)],
        stdout=subprocess.PIPE,
        cwd=ROOT,
        start_new_session=True,  # so that cleanup below can never hit the test runner
    )
    line = worker.stdout.readline()
    assert line, "the worker died before reporting its harness"
    return worker, json.loads(line)


def kill_worker(worker: subprocess.Popen) -> None:
    os.kill(worker.pid, signal.SIGKILL)
    assert worker.wait(timeout=10) == -signal.SIGKILL
    worker.stdout.close()


# "echo" serves through the SDK, which asks for PR_SET_PDEATHSIG itself; "ignore-sigterm"
# does not use sdk.serve, so only the runtime's own PDEATHSIG can save it.
@pytest.mark.parametrize("mode", ["echo", "ignore-sigterm"])
def test_harness_dies_with_a_sigkilled_worker(mode):
    worker, info = run_worker(scripted(mode))
    try:
        assert info["reply"] == "ping" and pid_running(info["harness"])
        kill_worker(worker)
        assert_pids_gone([info["harness"]], timeout_s=10)
    finally:
        _cleanup(worker, info)


def test_grandchild_made_to_die_with_its_parent_goes_too():
    # A grandchild dies with a worker only if it asked to (sdk.die_with_parent): it is
    # not our child, and no group signal is sent when the worker is SIGKILLed.
    worker, info = run_worker(scripted("fork-grandchild", "pdeathsig=1"))
    try:
        grandchildren = descendants(info["harness"])
        assert grandchildren
        kill_worker(worker)
        assert_pids_gone([info["harness"], *grandchildren], timeout_s=10)
    finally:
        _cleanup(worker, info)


def _cleanup(worker: subprocess.Popen, info: dict) -> None:
    # A SIGKILLed worker cannot remove its runtime's workdir: the test does.
    shutil.rmtree(info["workdir"], ignore_errors=True)
    # Only on failure is a process left: kill exactly what this test started.
    if worker.poll() is None:
        worker.kill()
        worker.wait()
    if worker.stdout and not worker.stdout.closed:
        worker.stdout.close()
    harness = info.get("harness")
    if harness:
        for pid in [harness, *descendants(harness)]:
            if pid_running(pid):
                os.kill(pid, signal.SIGKILL)
