"""Budgets with `run_batch(groups=True)` (issue 31): past the budget no new group starts,
the groups dispatched finish whole, and a re-run does not start over.

Real parts: the session's dev server and worker, a harness making one model call per
episode through the session's proxy, the scripted upstream counting its requests.
"""

from __future__ import annotations

import sys
import uuid

import pytest
from temporalio.client import Client

from episodes import contract
from episodes import search_attributes as sa
from episodes.client import EpisodesClient
from episodes.model.scripted.server import ScriptedUpstream, echo_policy
from episodes.types.priority import BatchBudget
from episodes.types.spec import EpisodeSpec
from tests.conftest import ROOT
from tests.support.helpers import spec, wait_until

pytestmark = pytest.mark.timeout(300)

CHATTY = [sys.executable, str(ROOT / "tests" / "support" / "harnesses" / "chatty_harness.py")]


def _chatty(upstream: ScriptedUpstream, name: str, tasks: int, samples: int) -> EpisodeSpec:
    """One-turn episodes of one model call each: the same tokens every time."""
    return spec(
        name=name,
        tasks=[{"id": f"t{i}", "data": {"messages": ["same"]}} for i in range(tasks)],
        command=CHATTY,
        harness={"env": {"CHATTY_CALLS": "1"}, "ready_timeout_s": 30},
        model={"base_url": upstream.base_url, "model": "scripted"},
        samples=samples,
    )


async def _episodes_are(client: Client, batch: str, n: int) -> bool:
    query = f"{sa.BATCH.name} = '{batch}' AND WorkflowType = '{contract.EPISODE_WORKFLOW}'"
    return (await client.count_workflows(query)).count == n


async def test_a_token_budget_stops_a_group_stream_and_a_rerun_does_not_start_over(
    client, worker
) -> None:
    ec = EpisodesClient(client, task_queue="episodes-test")
    async with ScriptedUpstream(policy=echo_policy) as upstream:
        probe = _chatty(upstream, f"gprobe-{uuid.uuid4().hex[:6]}", 1, 1)
        one = await ec.run_episode(probe, probe.tasks[0])
        assert one.termination == "env_done" and one.model_calls == 1, one.error
        per_episode = one.model_tokens
        assert per_episode > 1
        # Reached by the 3rd episode, in the second group: that group finishes whole
        # (its other member was dispatched with it), no third group starts.
        budget = BatchBudget(max_model_tokens=3 * per_episode - 1)
        s = _chatty(upstream, f"gbudget-{uuid.uuid4().hex[:6]}", 6, 2)
        # Two episodes in flight (one group's worth): a slot frees only as one ends, and
        # it is counted before the next dispatch, so the stop is exact.
        for _ in range(2):  # the second: a restarted trainer, re-attaching
            stream = ec.run_batch(s, groups=True, concurrency=2, budget=budget)
            groups = [g async for g in stream]
            assert [g.task_id for g in groups] == ["t0", "t1"]
            assert all(len(g.results) == 2 and g.failed is None for g in groups)
            assert ec.budget_exhausted == "max_model_tokens"
        assert await wait_until(lambda: _episodes_are(client, s.name, 4), timeout=30)
        assert len(upstream.chat_requests) == 1 + 4  # the re-run started nothing
        # Without a budget the stream goes on from there: the other 4 groups run.
        rest = [g async for g in ec.run_batch(s, groups=True, concurrency=2)]
        assert [g.task_id for g in rest] == [f"t{i}" for i in range(6)]
        assert ec.budget_exhausted is None
    assert len(upstream.chat_requests) == 1 + 4 + 8
