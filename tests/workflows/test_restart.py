"""`on_worker_lost: restart` and whole-chain scoring, with real worker processes that
are SIGKILLed mid-episode (see test_worker_lost.py)."""

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

from episodes.client.connect import connect
from episodes.client.histories.transcript import load_transcript
from episodes.types.io import EpisodeInput, EpisodeProgress
from episodes.types.results import EpisodeResult
from tests.conftest import ROOT
from tests.support.envs import ENDLESS
from tests.support.helpers import pid_alive, spec, wait_until
from workers.worker import EpisodeWorker, WorkerOptions


def _worker(address: str, queue: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "episodes.cli.main",
            "worker",
            "--address",
            address,
            "--task-queue",
            queue,
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def _progress(handle) -> EpisodeProgress | None:
    with contextlib.suppress(Exception):
        return await handle.query("progress", result_type=EpisodeProgress)
    return None


async def _start(client, queue: str, s, wid: str, turns_per_run: int):
    return await client.start_workflow(
        "EpisodeWorkflow",
        EpisodeInput(spec=s, task=s.tasks[0], turns_per_run=turns_per_run, batch=s.name),
        id=wid,
        task_queue=queue,
        result_type=EpisodeResult,
    )


def _harnesses(proc: subprocess.Popen) -> list[int]:
    return [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]


async def _kill_holder(handle, procs: list[subprocess.Popen], after_turns: int):
    """SIGKILL the worker process holding the episode's session once it ran a few turns."""

    async def far_enough() -> bool:
        p = await _progress(handle)
        return p is not None and p.turns_done >= after_turns and p.session is not None

    assert await wait_until(far_enough, timeout=60)
    p = await _progress(handle)
    [holder] = [w for w in procs if f"-{w.pid}-" in p.session.worker_id]
    harnesses = _harnesses(holder)
    assert harnesses
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    return holder, harnesses, time.monotonic()


def _pairs(transcript: dict) -> list[tuple]:
    return [(t["record"]["message"], t["record"]["reply"]) for t in transcript["turns"]]


async def test_restart_replays_on_another_worker_and_matches_a_clean_run(
    dev_server, worker
) -> None:
    """The clean run goes at the same time, on the session's in-process worker (its own
    queue): the kill cannot reach it."""
    queue = f"restart-{uuid.uuid4().hex[:6]}"
    procs = [_worker(dev_server.address, queue) for _ in range(2)]
    client = await connect(dev_server.address)
    try:
        s = spec(
            name=f"rs-{uuid.uuid4().hex[:6]}",
            env=ENDLESS,
            env_args={"delay_s": 0.15},
            max_turns=40,
            on_worker_lost="restart",
            worker_lost_timeout_s=3,
        )
        clean = await _start(client, "episodes-test", s, f"{s.name}.clean", 6)
        # Killed in a continued run (6 turns per run): the restore reads every run.
        handle = await _start(client, queue, s, f"{s.name}.killed", 6)
        holder, harnesses, killed_at = await _kill_holder(handle, procs, 15)
        result = await asyncio.wait_for(handle.result(), 120)
        assert (await asyncio.wait_for(clean.result(), 60)).restarts == 0
        took = time.monotonic() - killed_at
        assert (result.termination, result.turns, result.restarts) == ("max_turns", 40, 1)
        assert result.turns_replayed >= 12 and result.replay_divergences == 0
        print(
            f"restart: {result.turns_replayed} turns replayed, "
            f"{result.turns_rerun} re-run, episode done {took:.1f} s after the kill"
        )
        assert _pairs(await load_transcript(client, handle.id)) == _pairs(
            await load_transcript(client, clean.id)
        )
        assert await wait_until(lambda: not any(pid_alive(p) for p in harnesses), timeout=10)
        [survivor] = [w for w in procs if w is not holder]
        assert await wait_until(lambda: not _harnesses(survivor), timeout=15)  # released
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


async def test_restarts_exhausted_and_a_lost_continued_run_scores_the_whole_chain(
    dev_server,
) -> None:
    queue = f"exhaust-{uuid.uuid4().hex[:6]}"
    proc = _worker(dev_server.address, queue)
    client = await connect(dev_server.address)
    # Runs workflows (and the transcript score) but takes no sessions.
    survivor = EpisodeWorker(client, WorkerOptions(task_queue=queue, max_sessions=0))
    running = asyncio.create_task(survivor.run())
    try:
        s = spec(
            name=f"ex-{uuid.uuid4().hex[:6]}",
            env=ENDLESS,
            env_args={"delay_s": 0.15},
            max_turns=200,
            on_worker_lost="restart",
            max_restarts=0,
            worker_lost_timeout_s=3,
        )
        handle = await _start(client, queue, s, f"{s.name}.t0", 3)
        _, _, killed_at = await _kill_holder(handle, [proc], 8)
        result = await asyncio.wait_for(handle.result(), 60)
        print(f"worker_lost detected {time.monotonic() - killed_at:.1f} s after the kill")
        assert (result.termination, result.restarts) == ("worker_lost", 0)
        p = await _progress(handle)
        # Lost in a continued run. How many turns a run holds depends on how the drive
        # batched its records (3 a run at most when the workflow keeps up, more under
        # load), so the number of runs is not fixed: only that there was an earlier one.
        assert p is not None and p.runs >= 2
        # Scored on every recorded turn of the chain, not the last run's.
        assert result.turns >= 8 and result.turns > len(p.turns)
        assert result.score_details == {"turns": result.turns}
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        survivor.request_stop()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(running, 30)
