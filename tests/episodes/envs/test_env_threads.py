"""Env code never blocks the worker (issue 19): a sync `score()` that blocks runs on a
thread, and the other sessions on the same worker go on meanwhile."""

from __future__ import annotations

import asyncio
import uuid

from temporalio.client import WorkflowExecutionStatus

from episodes.client import EpisodesClient
from tests.support.envs import GATED_SCORE, gate
from tests.support.helpers import spec, wait_until

QUEUE = "episodes-test"


async def test_a_blocking_sync_score_does_not_freeze_the_other_sessions(client, worker) -> None:
    name = f"gated-{uuid.uuid4().hex[:6]}"
    started, opened = gate(name)
    episodes = EpisodesClient(client, task_queue=QUEUE)
    s = spec(name=name, env=GATED_SCORE, env_args={"gate": name, "max_s": 120})
    blocker = await episodes.start_episode(s, s.tasks[0])
    try:
        assert await wait_until(started.is_set, timeout=60)
        healthy = [spec(name=f"healthy-{i}-{uuid.uuid4().hex[:6]}") for i in range(6)]
        results = await asyncio.wait_for(
            asyncio.gather(*(episodes.run_episode(h, h.tasks[0]) for h in healthy)), 110
        )
        assert [r.termination for r in results] == ["env_done"] * 6
        # Before: the score froze the worker's loop until it returned (here: until its
        # `max_s` ran out), and the healthy episodes only went on after it.
        assert (await blocker.describe()).status == WorkflowExecutionStatus.RUNNING
        assert not opened.is_set()
    finally:
        opened.set()
    result = await asyncio.wait_for(blocker.result(), 60)
    assert result.termination == "env_done"
    assert result.score_details == {"opened": True}  # the test opened it, not `max_s`
