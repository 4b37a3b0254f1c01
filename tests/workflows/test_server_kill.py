"""SIGKILL the Temporal dev server mid-batch and restart it on the same SQLite file and
port: the batch completes, no episode is lost or run twice, every turn reached its
harness exactly once."""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections import Counter

import pytest
from temporalio.client import WorkflowExecutionStatus

from episodes.client.devserver import DevServer
from tests.support.chaos.helpers import (
    HARNESS,
    TRUSTED,
    WorkerProc,
    new_tag,
    results,
    script_spec,
    start_all,
    tagged_processes,
    turns,
    wait_closed,
)
from tests.support.helpers import wait_until
from tests.workers.test_worker_kill import _progress

pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.timeout(240)]

EPISODES, TURNS = 16, 8


async def _mid_batch(client, ids: list[str]) -> bool:
    done = 0
    for wid in ids:
        p = await _progress(client, wid)
        if p is None or p.session is None:
            return False
        done += p.turns_done >= 2
    return done >= len(ids) // 2


async def _runs(client, queue: str) -> Counter:
    runs: Counter = Counter()
    async for wf in client.list_workflows(f"TaskQueue = '{queue}'"):
        runs[(wf.id, wf.status)] += 1
    return runs


async def test_dev_server_sigkilled_and_restarted_mid_batch(chaos_server, chaos_client, tmp_path):
    queue, tag = f"srv-{uuid.uuid4().hex[:6]}", new_tag()
    seen = tmp_path / "turns"
    seen.mkdir()
    command = ["{python}", str(HARNESS), "log", "delay=0.5", f"dir={seen}", f"tag={tag}"]
    tasks = {f"t{i:02d}": turns(f"t{i:02d}", TURNS) for i in range(EPISODES)}
    # The outage must not read as a lost worker: heartbeats cannot land while it lasts.
    spec = script_spec(
        f"srv-{uuid.uuid4().hex[:6]}", tasks, command, worker_lost_timeout_s=60, harness=TRUSTED
    )
    workers = [
        WorkerProc(chaos_server.address, queue, tmp_path / f"w{i}.log").start() for i in range(2)
    ]
    restarted: DevServer | None = None
    try:
        for w in workers:
            await w.ready()
        ids = await start_all(chaos_client, queue, spec)
        assert await wait_until(lambda: _mid_batch(chaos_client, ids), timeout=90)

        assert chaos_server.process is not None
        down = time.monotonic()
        os.killpg(chaos_server.process.pid, signal.SIGKILL)
        chaos_server.process.wait(10)
        chaos_server.process = None
        time.sleep(1.0)  # the workers' calls fail meanwhile
        restarted = DevServer(
            port=chaos_server.port,
            headless=True,
            db_file=chaos_server.db_file,
            log_file=chaos_server.log_file,
        ).start()
        assert not restarted.reused, "a server of someone else's answered on our port"
        outage = time.monotonic() - down

        closed = await wait_closed(chaos_client, ids, timeout_s=150)
        assert len(closed) == EPISODES, f"stuck: {sorted(set(ids) - set(closed))}"
        by_id = await results(chaos_client, ids)
        outcomes = Counter(r.termination for r in by_id.values())
        print(f"\nserver kill: outage {outage:.1f} s; {EPISODES} episodes -> {dict(outcomes)}")
        assert outcomes == {"env_done": EPISODES}, by_id
        assert all(r.reward == 1.0 and r.turns == TURNS for r in by_id.values())

        # Exactly one run per workflow id, completed (visibility may trail the closes).
        want = Counter({(wid, WorkflowExecutionStatus.COMPLETED): 1 for wid in ids})
        assert await wait_until(lambda: _same(chaos_client, queue, want), timeout=30)

        # Each harness saw each of its turns once, from one process.
        for task, messages in tasks.items():
            lines = [json.loads(x) for x in (seen / f"{task}.log").read_text().splitlines()]
            assert [x["turn"] for x in lines] == list(range(TURNS)), (task, lines)
            assert [x["message"] for x in lines] == messages
            assert len({x["pid"] for x in lines}) == 1

        for w in workers:
            w.signal(signal.SIGTERM)
        assert [w.wait(60) for w in workers] == [0, 0], [w.text() for w in workers]
        assert await wait_until(lambda: not tagged_processes(tag), timeout=10)
    finally:
        for w in workers:
            w.kill()
        if restarted is not None:
            chaos_server.process = restarted.process  # the fixture stops it


async def _same(client, queue: str, want: Counter) -> bool:
    return await _runs(client, queue) == want
