"""Group execution (`execution="group"`) with what the per-episode groups path offers:
budgets, zero-variance skipping, oversampling (stragglers cut) and `group_timeout_s`
(partial groups). Real parts: the session's dev server and worker, the echo and LLM
harnesses, the model proxy and the scripted upstream (its `gate` holds a chosen
member's calls, so "a straggler" is the test's doing, not timing)."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError

from episodes import contract
from episodes import search_attributes as sa
from episodes.client import EpisodesClient
from episodes.client.histories.transcript import load_transcript
from episodes.model.scripted.chat_template import ChatTemplate
from episodes.model.scripted.server import ScriptedUpstream, echo_policy, kv_policy
from episodes.types.group import group_workflow_id
from episodes.types.priority import BatchBudget
from episodes.types.spec import parse_spec
from tests.episodes.client.test_groups_e2e import _kv
from tests.episodes.session.test_agent_session import UPSTREAM_KEY
from tests.support.helpers import spec, wait_until
from tests.workflows.test_group_budget import _chatty

pytestmark = pytest.mark.timeout(300)

QUEUE = "episodes-test"
STEP = 120


@pytest.fixture(autouse=True)
def _upstream_key(monkeypatch):
    monkeypatch.setenv("EPISODES_TEST_UPSTREAM_KEY", UPSTREAM_KEY)


def _gate(member: str, release: asyncio.Event):
    """Holds every model call of `member` (`.<task>.g.s<i>`) until `release`."""

    async def gate(request: dict) -> None:
        if member in request["headers"].get("X-Session-ID", ""):
            await release.wait()

    return gate


async def _groups_are(client, batch: str, n: int) -> bool:
    query = f"{sa.BATCH.name} = '{batch}' AND WorkflowType = '{contract.GROUP_WORKFLOW}'"
    return (await client.count_workflows(query)).count == n


async def test_a_budget_stops_group_workflows_and_a_rerun_does_not_start_over(
    client, worker
) -> None:
    """As with one workflow per episode (test_group_budget): counted from the members'
    results as each group ends; past it no new group starts."""
    ec = EpisodesClient(client, task_queue=QUEUE)
    async with ScriptedUpstream(policy=echo_policy) as upstream:
        probe = _chatty(upstream, f"gxprobe-{uuid.uuid4().hex[:6]}", 1, 1)
        one = await ec.run_episode(probe, probe.tasks[0])
        assert one.termination == "env_done" and one.model_calls == 1, one.error
        per_episode = one.model_tokens
        # Reached by the second group (4 episodes): no third group starts.
        budget = BatchBudget(max_model_tokens=3 * per_episode - 1)
        s = _chatty(upstream, f"gxbudget-{uuid.uuid4().hex[:6]}", 6, 2)
        for _ in range(2):  # the second: a restarted trainer, re-attaching
            stream = ec.run_batch(s, groups=True, execution="group", concurrency=2, budget=budget)
            groups = [g async for g in stream]
            assert [g.task_id for g in groups] == ["t0", "t1"]
            assert all(len(g.results) == 2 and g.failed is None for g in groups)
            assert ec.budget_exhausted == "max_model_tokens"
        assert await wait_until(lambda: _groups_are(client, s.name, 2), timeout=30)
        assert len(upstream.chat_requests) == 1 + 4  # the re-run started nothing
        # Without groups (results one by one), the same stop.
        flat = ec.run_batch(s, execution="group", concurrency=2, budget=budget)
        assert len([r async for r in flat]) == 4 and ec.budget_exhausted == "max_model_tokens"
        rest = [g async for g in ec.run_batch(s, groups=True, execution="group", concurrency=2)]
        assert [g.task_id for g in rest] == [f"t{i}" for i in range(6)]
        assert ec.budget_exhausted is None
    assert len(upstream.chat_requests) == 1 + 4 + 8


async def test_zero_variance_group_workflows_are_flagged_or_skipped_and_counted(
    client, worker
) -> None:
    tasks = [
        {"id": "x", "data": {"messages": ["a"], "expected": ["a"]}},
        {"id": "y", "data": {"messages": ["a"], "expected": ["nope"]}},
        {"id": "z", "data": {"messages": ["a", "b"], "expected": ["a", "nope"]}},
    ]
    s = spec(name=f"gxzv-{uuid.uuid4().hex[:6]}", tasks=tasks, samples=2)
    ec = EpisodesClient(client, task_queue=QUEUE)
    flagged = [g async for g in ec.run_batch(s, groups=True, execution="group")]
    assert sorted((g.task_id, g.zero_variance) for g in flagged) == [
        ("x", True),
        ("y", True),
        ("z", True),
    ]
    assert ec.zero_variance_skipped == 0
    skip = ec.run_batch(
        s, groups=True, execution="group", skip_zero_variance=True, batch_id=f"{s.name}-skip"
    )
    assert [g async for g in skip] == [] and ec.zero_variance_skipped == 3
    assert ec.episodes_ran == 6  # the skipped groups' episodes ran all the same


async def test_oversampled_group_workflows_cut_the_straggler(client, worker) -> None:
    """samples 2 + oversample 1 in one group workflow: member s1 never gets a model
    answer. The group ends once s0 and s2 ended; s1 is cut (`cut: straggler`, ended
    `cancelled`, its session closed) and never exported; a re-run re-attaches and
    yields the same group."""
    release = asyncio.Event()
    up = ScriptedUpstream(
        policy=kv_policy,
        key=UPSTREAM_KEY,
        template=ChatTemplate(),
        gate=_gate(".ab.g.s1", release),
    )
    ec = EpisodesClient(client, task_queue=QUEUE)
    async with up:
        s = parse_spec(_kv(up.base_url, {"ab": {"a": "1"}}))
        try:
            run = ec.run_batch(s, groups=True, execution="group", oversample=1, concurrency=3)
            groups = [g async for g in run]
        finally:
            release.set()
        again = [g async for g in ec.run_batch(s, groups=True, execution="group", oversample=1)]
    ids = [f"{s.name}.ab.g.s{i}" for i in range(3)]
    [g] = groups
    assert [r.workflow_id for r in g.results] == [ids[0], ids[2]]
    assert [r.termination for r in g.results] == ["env_done", "env_done"]
    assert (g.cut, g.partial, g.failed) == ([ids[1]], False, None)
    assert g.advantages() == [0.0, 0.0]
    [g2] = again
    assert ([r.workflow_id for r in g2.results], g2.cut) == ([ids[0], ids[2]], [ids[1]])
    data = await load_transcript(client, ids[1])
    assert (data["result"]["termination"], data["result"]["cut"]) == ("cancelled", "straggler")
    assert await wait_until(lambda: worker.groups.members == 0, timeout=30)


class _ActivityClock:
    """`activities.group`'s wall clock, moved on by `group_timeout_s` once the test says
    so (`jump`): the `run_group` activity reads it only when a member ends, so the
    reading after the last member that ends is past the deadline (never real time:
    the timeout is long), and nothing else can end first."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s, self.jumped = timeout_s, False

    def time(self) -> float:
        return time.time() + (self.timeout_s if self.jumped else 0.0)

    @staticmethod
    def monotonic() -> float:
        return time.monotonic()


async def test_a_group_workflow_past_group_timeout_s_is_cut(client, worker, monkeypatch) -> None:
    """Task `slow`'s member s1 never gets a model answer: at `group_timeout_s` the
    group workflow cuts it (`cut: group_timeout`) and the group comes out partial
    with the member that ended or, with `drop`, not at all; the other group is whole.
    Both choices run at once. Member s0 of `slow` is held until both `quick` groups
    ended and the activity's clock has moved past the deadline: its end is the
    `slow` activity's next reading, the cut comes right after it, whatever the load."""
    from activities import group as group_activity

    timeout_s = 600.0  # never reached in real time: the clock's jump passes it
    clock = _ActivityClock(timeout_s)
    monkeypatch.setattr(group_activity, "time", clock)
    hold_s0 = asyncio.Event()
    never = asyncio.Event()

    async def gate(request: dict) -> None:
        session = request["headers"].get("X-Session-ID", "")
        if ".slow.g.s1" in session:
            await never.wait()
        elif ".slow.g.s0" in session:
            await hold_s0.wait()

    up = ScriptedUpstream(policy=kv_policy, key=UPSTREAM_KEY, gate=gate)
    async with up:
        specs = {}
        for on_timeout in ("partial", "drop"):
            data = _kv(up.base_url, {"quick": {"a": "1"}, "slow": {"z": "9"}})
            data.update(group_timeout_s=timeout_s, group_on_timeout=on_timeout)
            specs[on_timeout] = parse_spec(data)

        async def run(s: Any) -> list[Any]:
            ec = EpisodesClient(client, task_queue=QUEUE)
            return [g async for g in ec.run_batch(s, groups=True, execution="group", concurrency=4)]

        async def release() -> None:
            async def quick_ended() -> bool:
                ids = [group_workflow_id(s.name, "quick") for s in specs.values()]
                try:
                    descs = [await client.get_workflow_handle(i).describe() for i in ids]
                except RPCError:  # not started yet
                    return False
                return all(d.status == WorkflowExecutionStatus.COMPLETED for d in descs)

            assert await wait_until(quick_ended, timeout=STEP)
            clock.jumped = True
            hold_s0.set()

        try:
            partial, drop, _ = await asyncio.gather(
                run(specs["partial"]), run(specs["drop"]), release()
            )
        finally:
            hold_s0.set()
            never.set()
    for on_timeout, groups in (("partial", partial), ("drop", drop)):
        s = specs[on_timeout]
        by_task = {g.task_id: g for g in groups}
        quick = by_task["quick"]
        assert not quick.partial and [r.termination for r in quick.results] == ["env_done"] * 2
        cut = await load_transcript(client, f"{s.name}.slow.g.s1")
        assert (cut["result"]["termination"], cut["result"]["cut"]) == (
            "cancelled",
            "group_timeout",
        )
        if on_timeout == "drop":
            assert list(by_task) == ["quick"]
            continue
        slow = by_task["slow"]
        assert slow.partial and slow.failed is None
        assert [(r.workflow_id, r.termination) for r in slow.results] == [
            (f"{s.name}.slow.g.s0", "env_done")
        ]
        assert slow.cut == [f"{s.name}.slow.g.s1"]


async def test_a_batch_workflows_group_past_group_timeout_s_is_cut(client, worker) -> None:
    """`execution: group` in a batch workflow (`start_batch`) honours `group_timeout_s`
    as the client's stream does: task `slow`'s member s1 never gets a model answer,
    and the group workflow cuts it (`cut: group_timeout`) at the timeout; the batch
    records it `cancelled` (no reward) and ends, the other members with their outcomes."""
    from episodes.client.batch.server import batch_input, start_batch

    release = asyncio.Event()
    up = ScriptedUpstream(policy=kv_policy, key=UPSTREAM_KEY, gate=_gate(".slow.g.s1", release))
    async with up:
        data = _kv(up.base_url, {"quick": {"a": "1"}, "slow": {"z": "9"}})
        # Generous: the other members finish in seconds; the cut waits this long.
        data.update(execution="group", group_timeout_s=30)
        s = parse_spec(data)
        handle = await start_batch(client, batch_input(s), task_queue=QUEUE)
        try:
            # Without the cut the batch waits on s1 for as long as the gate holds.
            result = await asyncio.wait_for(handle.result(), 150)
        finally:
            release.set()
    m = result.metrics
    assert (m.count, m.terminations) == (4, {"cancelled": 1, "env_done": 3})
    cut = await load_transcript(client, f"{s.name}.slow.g.s1")
    assert (cut["result"]["termination"], cut["result"]["cut"]) == ("cancelled", "group_timeout")
