"""Lost workers and cancelled episodes end in a named outcome with nothing left running."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid

import psutil

from episodes.client import EpisodesClient
from episodes.client.connect import connect
from episodes.types.io import EpisodeProgress
from tests.conftest import ROOT
from tests.support.helpers import host_pid, pid_alive, spec, wait_until
from workers.worker import EpisodeWorker, WorkerOptions

REPL = ["{python}", "-m", "episodes.harness.reference.repl"]
SLOW = {"id": "slow", "data": {"snippets": ["x = 1", "import time; time.sleep(120)", "x"]}}


async def _progress(handle) -> EpisodeProgress | None:
    with contextlib.suppress(Exception):
        return await handle.query("progress", result_type=EpisodeProgress)
    return None


async def _turns_done(handle, n: int) -> bool:
    p = await _progress(handle)
    return p is not None and p.turns_done >= n


async def test_worker_sigkilled_mid_episode_ends_worker_lost(dev_server) -> None:
    queue = f"lost-{uuid.uuid4().hex[:6]}"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "episodes.cli.main",
            "worker",
            "--address",
            dev_server.address,
            "--task-queue",
            queue,
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    # A survivor that runs workflows but takes no sessions (max_sessions=0), so the
    # provision must land on the worker we are about to kill.
    client = await connect(dev_server.address)
    survivor = EpisodeWorker(client, WorkerOptions(task_queue=queue, max_sessions=0))
    running = asyncio.create_task(survivor.run())
    try:
        s = spec(
            name=f"lost-{uuid.uuid4().hex[:6]}",
            env="python-repl",
            command=REPL,
            tasks=[SLOW],
            turn_timeout_s=300,
            worker_lost_timeout_s=3,
        )
        handle = await EpisodesClient(client, task_queue=queue).start_episode(s, s.tasks[0])
        assert await wait_until(lambda: _turns_done(handle, 1), timeout=60)
        harnesses = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
        assert harnesses, "the worker should be running the harness"

        killed_at = time.monotonic()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        # Heartbeat + schedule-to-start timeouts (~15 s); the drive's own backstop would
        # take minutes. A loaded machine stretches the former, so no tighter bound.
        result = await asyncio.wait_for(handle.result(), 120)
        detected_after = time.monotonic() - killed_at

        assert result.termination == "worker_lost"
        assert "lost the session" in (result.error or "")
        assert result.turns == 1
        print(f"worker_lost detected {detected_after:.1f} s after the kill")
        assert await wait_until(lambda: not any(pid_alive(p) for p in harnesses), timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        survivor.request_stop()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(running, 30)


async def test_cancelled_episode_releases_its_harness(client, worker) -> None:
    s = spec(
        name=f"cancel-{uuid.uuid4().hex[:6]}",
        env="python-repl",
        command=REPL,
        tasks=[SLOW],
        turn_timeout_s=300,
    )
    handle = await EpisodesClient(client, task_queue="episodes-test").start_episode(s, s.tasks[0])
    assert await wait_until(lambda: _turns_done(handle, 1), timeout=60)
    [entry] = [e for e in worker.registry.entries() if e.workflow_id == handle.id]
    pid = host_pid(entry.session)
    assert pid and pid_alive(pid)

    await handle.cancel()
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.termination == "cancelled"
    assert handle.id not in {e.workflow_id for e in worker.registry.entries()}
    assert await wait_until(lambda: not pid_alive(pid), timeout=10)
