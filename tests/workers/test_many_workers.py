"""Three real `episodes worker` processes share one queue: spread, stickiness, backpressure."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections import defaultdict

import pytest
from temporalio.api.enums.v1 import EventType

from episodes import contract
from episodes.client import EpisodesClient
from tests.support.helpers import spec as make_spec
from tests.support.worker_procs import WorkerProc, value

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
MAX_SESSIONS = 3


async def activity_workers(client, workflow_id: str) -> dict[str, set[str]]:  # type: ignore[no-untyped-def]
    """activity name -> the identities that ran it, and the task queues it was sent to."""
    scheduled: dict[int, tuple[str, str]] = {}
    out: dict[str, set[str]] = defaultdict(set)
    async for ev in client.get_workflow_handle(workflow_id).fetch_history_events():
        if ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            a = ev.activity_task_scheduled_event_attributes
            scheduled[ev.event_id] = (a.activity_type.name, a.task_queue.name)
        elif ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            a = ev.activity_task_started_event_attributes
            name, queue = scheduled[a.scheduled_event_id]
            out[name].add(a.identity)
            out[f"{name}:queue"].add(queue)
    return out


async def test_batch_spreads_sticks_and_holds_backpressure(dev_server, client, tmp_path):
    queue = f"many-{uuid.uuid4().hex[:6]}"
    workers = [
        WorkerProc(
            dev_server.address, queue, tmp_path / f"w{i}.log", "--max-sessions", str(MAX_SESSIONS)
        )
        for i in range(3)
    ]
    # Every episode's one turn waits for this file: sessions stay open until the test
    # has seen every worker full, so the overlap is certain, not a sampler's luck.
    gate = tmp_path / "gate"
    held = f"import os, time\nwhile not os.path.exists({str(gate)!r}):\n    time.sleep(0.05)\n'ok'"
    peak: dict[str, float] = defaultdict(float)
    stop = threading.Event()

    def live() -> dict[str, float]:  # each worker's live sessions, from its metrics endpoint
        return {
            w.worker_id: value(w.metrics(), "episodes_live_sessions", worker=w.worker_id)
            for w in workers
        }

    def sample() -> None:  # only an upper bound rests on sampling: it can miss, not lie
        while not stop.is_set():
            for wid, n in live().items():
                peak[wid] = max(peak[wid], n)
            stop.wait(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    batch = None
    try:
        spec = make_spec(
            name=f"many-{uuid.uuid4().hex[:6]}",
            env="python-repl",
            command=["{python}", "-m", "episodes.harness.reference.repl"],
            tasks=[{"id": f"t{i}", "data": {"snippets": [held]}} for i in range(5)],
            samples=4,
            turn_timeout_s=180.0,
            # The gate is a file in the test's folder: a sandbox would not see it.
            harness={"runtime": {"type": "subprocess", "isolation": "none"}},
        )
        sampler.start()

        async def run() -> list:
            ec = EpisodesClient(client, task_queue=queue)
            return [r async for r in ec.run_batch(spec, concurrency=20)]

        batch = asyncio.create_task(run())
        # 20 episodes, 3 workers x 3 sessions: every worker fills up and no more.
        full = {w.worker_id: float(MAX_SESSIONS) for w in workers}
        deadline = time.monotonic() + 120
        while (now := await asyncio.to_thread(live)) != full:
            assert time.monotonic() < deadline, f"workers never all full: {now}"
            assert not batch.done(), batch
            await asyncio.sleep(0.1)
        gate.touch()
        results = await asyncio.wait_for(batch, 180)
        stop.set()
        sampler.join(5)
        assert len(results) == 20
        assert all(r.termination == "env_done" and r.turns == 1 for r in results), results

        ids = {w.worker_id for w in workers}
        provisioned_by: dict[str, int] = defaultdict(int)
        for r in results:
            wid = contract.episode_id(spec.name, r.task_id, r.sample)
            ran = await activity_workers(client, wid)
            [prov] = ran[contract.PROVISION]
            owner = prov.rsplit("@", 1)[0]  # `<id>@provision`: the worker process
            assert owner in ids
            provisioned_by[owner] += 1
            # Every later step of the session ran on that worker, through its own queue
            # (on the normal path the drive releases the session itself: no release step).
            assert ran[contract.DRIVE], (wid, ran)
            for step in (contract.DRIVE, contract.RELEASE):
                if not ran[step]:
                    continue
                assert ran[step] == {f"{owner}@session"}, (wid, step, ran)
                assert ran[f"{step}:queue"] == {f"{queue}-session-{owner}"}
        print("provisions per worker", dict(provisioned_by), "peak live", dict(peak))
        assert set(provisioned_by) == ids, provisioned_by  # every worker was full once
        assert sum(provisioned_by.values()) == 20
        assert all(p <= MAX_SESSIONS for p in peak.values()), dict(peak)
        for w in workers:
            m = w.metrics()
            assert (
                value(m, "episodes_provisions_total", outcome="ok") == provisioned_by[w.worker_id]
            )
    finally:
        gate.touch()
        stop.set()
        if batch is not None and not batch.done():
            batch.cancel()
        for w in workers:
            w.stop()
