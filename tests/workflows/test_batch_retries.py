"""Batches tell infrastructure failures from agent outcomes: a provision that fails for a
non-harness reason (no such box) runs again as a fresh episode `<id>.r1`, and is then
counted apart; an agent failure (the harness crashing at start) is never re-run."""

from __future__ import annotations

import asyncio
import uuid

from episodes.client import EpisodesClient
from episodes.client.batch.server import batch_input, start_batch
from tests.support.helpers import spec

QUEUE = "episodes-test"
NO_BOX = {"runtime": {"type": "docker", "image": "episodes-no-such-image:none"}}
CRASH = ["{python}", "-c", "import sys; sys.exit(3)"]


async def test_batch_workflow_retries_infra_failures_only(client, worker) -> None:
    name = f"br-{uuid.uuid4().hex[:6]}"
    s = spec(name=name, harness=NO_BOX, batch_retries=1)
    result = await asyncio.wait_for(
        (await start_batch(client, batch_input(s), task_queue=QUEUE)).result(), 120
    )
    m = result.metrics
    assert (m.count, m.infra_failures, m.retried) == (1, 1, 1)
    assert (m.groups_complete, m.groups_failed) == (0, 1)  # its task's group: masked
    assert any(".r1" in e for e in result.errors)  # the fresh episode ran, and failed too

    s = spec(name=f"{name}-agent", command=CRASH, batch_retries=1)
    result = await asyncio.wait_for(
        (await start_batch(client, batch_input(s), task_queue=QUEUE)).result(), 60
    )
    m = result.metrics
    assert m.terminations == {"harness_start_failed": 1}
    assert (m.infra_failures, m.retried) == (0, 0)
    assert (m.groups_complete, m.groups_failed) == (1, 0)  # the agent's outcome


async def test_client_side_batch_retries_a_failed_provision(client, worker) -> None:
    s = spec(name=f"cr-{uuid.uuid4().hex[:6]}", harness=NO_BOX, batch_retries=1)
    episodes = EpisodesClient(client, task_queue=QUEUE)
    [result] = [r async for r in episodes.run_batch(s)]
    # Retried once as a fresh episode, which failed too: a named result, not a raise.
    assert result.termination == "workflow_failed" and result.workflow_id.endswith(".r1")
    assert result.error and "failed" in result.error
