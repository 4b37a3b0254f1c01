"""Group execution (`run_batch(groups=True, execution="group")`): one workflow per group,
members addressed by id, with real parts (a Temporal dev server and worker, the echo
and LLM harnesses, the model proxy and the scripted upstream over HTTP)."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import pytest

from episodes import contract
from episodes import search_attributes as sa
from episodes.client import EpisodesClient
from episodes.client.batch.server import batch_input, start_batch
from episodes.client.blocking.client import SyncEpisodesClient
from episodes.client.group.history import group_members
from episodes.client.histories.transcript import load_transcript
from episodes.errors import EpisodesError
from episodes.model.scripted.chat_template import ChatTemplate
from episodes.model.scripted.server import ScriptedUpstream, kv_policy
from episodes.types.group import GroupResult, parse_member
from episodes.types.spec import parse_spec
from episodes.viewer.members import batch_rows
from episodes.viewer.transcripts import Episodes
from tests.conftest import scripted_command
from tests.episodes.cli.test_cli import episodes as cli
from tests.episodes.cli.test_cli import write_spec
from tests.episodes.client.test_groups_e2e import _kv
from tests.episodes.session.test_agent_session import UPSTREAM_KEY
from tests.support.helpers import spec, wait_until

pytestmark = pytest.mark.timeout(300)

QUEUE = "episodes-test"


@pytest.fixture(autouse=True)
def _upstream_key(monkeypatch):
    monkeypatch.setenv("EPISODES_TEST_UPSTREAM_KEY", UPSTREAM_KEY)


async def test_groups_run_as_one_workflow_each_and_members_are_addressable(
    client, worker, dev_server
) -> None:
    name = f"gx-{uuid.uuid4().hex[:6]}"
    s = spec(
        name=name,
        samples=3,
        tasks=[
            {"id": "a", "data": {"messages": ["x", "y"], "expected": ["x", "y"]}},
            {"id": "b", "data": {"messages": ["z"], "expected": ["nope"]}},
        ],
    )
    ec = EpisodesClient(client, task_queue=QUEUE)
    groups = [g async for g in ec.run_batch(s, groups=True, execution="group")]
    groups.sort(key=lambda g: g.task_id)  # yielded as each ends
    assert [g.task_id for g in groups] == ["a", "b"]
    for g in groups:
        assert g.failed is None and g.group_id == f"{name}/{g.task_id}"
        assert [r.sample for r in g.results] == [0, 1, 2]
        assert [r.workflow_id for r in g.results] == [
            f"{name}.{g.task_id}.g.s{i}" for i in range(3)
        ]
    a, b = groups
    assert {(r.termination, r.turns, r.reward) for r in a.results} == {("env_done", 2, 1.0)}
    assert {(r.termination, r.turns, r.reward) for r in b.results} == {("env_done", 1, 0.0)}
    # Each member's result says where its box ran, as an episode's does.
    assert {r.runtime for r in (*a.results, *b.results)} == {"subprocess"}
    # One workflow per group, none per episode; findable by batch and task.
    found = [
        wf
        async for wf in client.list_workflows(
            f"{sa.BATCH.name} = '{name}' AND {sa.TASK.name} = 'a'"
        )
    ]
    assert [(wf.id, wf.workflow_type) for wf in found] == [(f"{name}.a.g", contract.GROUP_WORKFLOW)]
    members = await group_members(client, name)
    assert [wf.id for wf in members] == [f"{name}.{t}.g.s{i}" for t in "ab" for i in range(3)]

    # The viewer's batch page lists the members, each with its own outcome.
    rows, _ = await batch_rows(client, name)
    assert sorted((r["id"], r["termination"], r["reward"]) for r in rows) == sorted(
        (r.workflow_id, r.termination, r.reward) for g in groups for r in g.results
    )
    # A member's transcript, as `episodes show`, the viewer and trainers read it.
    member = a.results[1].workflow_id
    transcript = await ec.transcript(member)
    assert [(t.turn, t.message, t.reply) for t in transcript.turns] == [
        (0, "x", "x"),
        (1, "y", "y"),
    ]
    data = await load_transcript(client, member)
    assert data["result"]["workflow_id"] == member and data["result"]["reward"] == 1.0
    page = await Episodes(client).page(member)
    assert page["episode"]["id"] == member and page["episode"]["sample"] == 1
    assert page["episode"]["termination"] == "env_done" and page["total_turns"] == 2
    code, out, err = await cli("show", member, "--address", dev_server.address)
    assert code == 0, err
    assert "env_done after 2 turns" in out
    # A sample the group does not have names no member.
    with pytest.raises(EpisodesError, match="no episode"):
        await load_transcript(client, f"{name}.a.g.s7")
    assert parse_member(f"{name}.a.s0") is None
    # The group's own id says what to ask for instead.
    with pytest.raises(EpisodesError, match=rf"{name}\.a\.g\.s0, \.s1"):
        await load_transcript(client, f"{name}.a.g")


async def test_group_members_export_and_train_from_their_samples(
    client, worker, dev_server, tmp_path: Path
) -> None:
    """The LLM harness through the model proxy: `Group.samples()` reads each member's
    model calls by member id, and `episodes export` writes a row per member's call."""
    pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    up = ScriptedUpstream(policy=kv_policy, key=UPSTREAM_KEY, template=ChatTemplate())
    ec = EpisodesClient(client, task_queue=QUEUE)
    async with up:
        data = _kv(up.base_url, {"k1": {"a": "1"}, "k2": {"b": "2"}})
        model = data["model"]["model"]
        # Priced: each member's result holds its usage and cost (`member_result`).
        data["prices"] = {"models": {model: {"input": 1.0, "output": 2.0}}}
        s = parse_spec(data)
        groups = [
            g
            async for g in ec.run_batch(
                s, groups=True, execution="group", policy_version=0, concurrency=4
            )
        ]
        assert len(groups) == 2
        for r in (r for g in groups for r in g.results):
            u = r.usage[model]
            assert u.calls == r.model_calls > 0 and u.input_tokens > 0
            assert r.cost is not None
            assert r.cost.model == pytest.approx((u.input_tokens + 2 * u.output_tokens) / 1e6)
        for g in groups:
            samples = await g.samples()
            assert len(samples) == 2 and all(x.made_calls and x.complete for x in samples)
            assert g.advantages() == [0.0, 0.0] or None not in g.advantages()
        out = tmp_path / "rows.parquet"
        code, text, err = await cli(
            "export", s.name, "--out", str(out), "--address", dev_server.address
        )
        assert code == 0, err + text
    rows = pq.read_table(out).to_pylist()
    ids = {r["episode_id"] for r in rows}
    assert ids == {f"{s.name}.{t}.g.s{i}" for t in ("k1", "k2") for i in range(2)}
    assert {r["group_id"] for r in rows} == {f"{s.name}/k1", f"{s.name}/k2"}
    assert all(r["episode_cost"] > 0 and r["episode_input_tokens"] > 0 for r in rows)


async def test_execution_is_checked_and_the_sync_client_passes_it(
    client, worker, dev_server
) -> None:
    ec = EpisodesClient(client, task_queue=QUEUE)
    with pytest.raises(EpisodesError, match="groups=True"):
        ec.run_batch(spec(name="gx-bad"), execution="group", max_staleness=1)
    # Without `groups`: the members' results one by one, from the sync client too.
    s = spec(name=f"gx-sync-{uuid.uuid4().hex[:6]}", samples=2)

    def trainer() -> list[str]:
        with SyncEpisodesClient.connect(dev_server.address, task_queue=QUEUE) as sc:
            return [r.workflow_id for r in sc.run_batch(s, execution="group")]

    ids = await asyncio.to_thread(trainer)
    assert ids == [f"{s.name}.t0.g.s0", f"{s.name}.t0.g.s1"]


async def test_a_stale_group_workflow_is_cancelled_and_run_again_at_the_new_version(
    client, worker
) -> None:
    """As on the default path (test_groups_e2e), with one workflow per group: the stale
    group's workflow is cancelled (its members end `cancelled`, their sessions closed)
    and the group runs again as `<id>.r1` at the current version."""
    release = asyncio.Event()

    async def gate(request: dict) -> None:
        late = ".late.g.s" in request["headers"].get("X-Session-ID", "")
        if late and request["body"].get("cache_salt") == "episodes-policy-0":
            await release.wait()

    up = ScriptedUpstream(policy=kv_policy, key=UPSTREAM_KEY, template=ChatTemplate(), gate=gate)
    ec = EpisodesClient(client, task_queue=QUEUE)
    async with up:
        s = parse_spec(_kv(up.base_url, {"early": {"a": "1"}, "late": {"z": "9"}}))
        agen = ec.run_batch(
            s,
            groups=True,
            execution="group",
            policy_version=0,
            max_staleness=1,
            on_stale="requeue",
            concurrency=4,
        )
        try:
            first = await asyncio.wait_for(agen.__anext__(), 120)
            assert (first.task_id, first.policy_version, first.stale) == ("early", 0, 0)
            ec.policy_version = 2
            second = await asyncio.wait_for(agen.__anext__(), 120)
            with pytest.raises(StopAsyncIteration):
                await asyncio.wait_for(agen.__anext__(), 120)
        finally:
            await agen.aclose()
            release.set()
    assert (second.task_id, second.policy_version, second.stale) == ("late", 2, 1)
    assert second.failed is None and all(r.reward == 1.0 for r in second.results)
    assert [r.workflow_id for r in second.results] == [f"{s.name}.late.g.r1.s{i}" for i in (0, 1)]
    stale = client.get_workflow_handle(f"{s.name}.late.g", result_type=GroupResult)
    cancelled = await asyncio.wait_for(stale.result(), 120)
    assert {r.termination for r in cancelled.results} == {"cancelled"}
    for r in second.results:
        calls = (await ec.transcript(r.workflow_id)).model_calls()
        assert calls and {c.policy_version for c in calls} == {2}
    # The cancelled attempt's sessions were closed: no member session is left live.
    assert await wait_until(lambda: worker.groups.members == 0, timeout=30)


async def test_a_batch_workflow_runs_groups_and_awaits_one_that_already_ran(client, worker) -> None:
    """`execution: group` in the spec: the batch workflow starts one child group
    workflow a task; a group that already ran under its id (an earlier client-side
    run with the same batch id) is awaited, not run again."""
    batch = f"gxb-{uuid.uuid4().hex[:6]}"
    tasks = [
        {"id": "a", "data": {"messages": ["x"], "expected": ["x"]}},
        {"id": "b", "data": {"messages": ["z"], "expected": ["nope"]}},
    ]
    s = spec(name=batch, samples=2, tasks=tasks, execution="group")
    ec = EpisodesClient(client, task_queue=QUEUE)
    one = s.model_copy(update={"tasks": s.tasks[:1]})
    [first] = [g async for g in ec.run_batch(one, batch_id=batch, groups=True)]
    before = (await client.get_workflow_handle(f"{batch}.a.g").describe()).run_id
    handle = await start_batch(client, batch_input(s, batch_id=batch), task_queue=QUEUE)
    result = await asyncio.wait_for(handle.result(), 120)
    m = result.metrics
    assert (m.count, m.mean_reward, m.terminations) == (4, 0.5, {"env_done": 4})
    assert (await client.get_workflow_handle(f"{batch}.a.g").describe()).run_id == before
    members = await group_members(client, batch)
    assert [wf.id for wf in members] == [f"{batch}.{t}.g.s{i}" for t in "ab" for i in (0, 1)]
    assert first.results[0].workflow_id == f"{batch}.a.g.s0"
    # No per-episode workflow ran for the batch.
    episodes = [
        wf
        async for wf in client.list_workflows(
            f"{sa.BATCH.name} = '{batch}' AND WorkflowType = '{contract.EPISODE_WORKFLOW}'"
        )
    ]
    assert episodes == []


async def test_episodes_run_with_execution_group_in_the_spec(client, worker, tmp_path) -> None:
    """`episodes run` honours the spec's `execution: group`: the results are the members'."""
    name = f"gx-run-{uuid.uuid4().hex[:6]}"
    data = {
        "name": name,
        "env": "script",
        "tasks": [{"id": "a", "data": {"messages": ["x"], "expected": ["x"]}}],
        "samples": 2,
        "execution": "group",
        "harness": {"command": ["{python}", "-m", "episodes.harness.reference.echo"]},
        "max_turns": 3,
    }
    out = tmp_path / "results.jsonl"
    addr = ["--address", client.service_client.config.target_host, "--task-queue", QUEUE]
    code, text, err = await cli("run", str(write_spec(tmp_path, data)), "--out", str(out), *addr)
    assert code == 0, err + text
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["workflow_id"] for r in rows) == [f"{name}.a.g.s0", f"{name}.a.g.s1"]
    assert {(r["termination"], r["reward"]) for r in rows} == {("env_done", 1.0)}


async def test_members_that_cannot_start_are_outcomes_not_a_failed_group(client, worker) -> None:
    """A harness that exits at once, and an env the worker cannot import (a spec
    error): each member ends `harness_start_failed` (the latter marked
    `config_error`), as an EpisodeWorkflow would, and the group is not run again."""
    crash = ["{python}", "-c", "import sys; sys.exit(3)"]
    ec = EpisodesClient(client, task_queue=QUEUE)
    s = spec(name=f"gx-crash-{uuid.uuid4().hex[:6]}", command=crash, samples=2)
    [g] = [g async for g in ec.run_batch(s, groups=True, execution="group")]
    assert g.failed is None and g.retried == 0
    assert [(r.termination, r.config_error) for r in g.results] == [
        ("harness_start_failed", False)
    ] * 2
    s = spec(name=f"gx-noenv-{uuid.uuid4().hex[:6]}", env="no_such_module:Env", samples=2)
    [g] = [g async for g in ec.run_batch(s, groups=True, execution="group")]
    assert g.failed is None and g.retried == 0
    assert [(r.termination, r.config_error) for r in g.results] == [
        ("harness_start_failed", True)
    ] * 2
    assert "no_such_module" in (g.results[0].error or "")


async def test_a_group_too_big_for_one_payload_fails_at_once_saying_what_to_do(
    client, worker
) -> None:
    """A group's heartbeat and its activity's result carry every member's turns in one
    payload (Temporal's limit: 2 MB). Members whose turns outgrow what one payload may
    carry inline stop there, and the group fails with one line that says what to do
    (a configuration error: not run again), instead of the server rejecting it."""
    big = scripted_command("flood", "n=4", "kb=128")  # 512 KiB of events every turn
    s = spec(name=f"gx-big-{uuid.uuid4().hex[:6]}", command=big, samples=2)  # 3 turns each
    ec = EpisodesClient(client, task_queue=QUEUE)

    async def run() -> list:
        return [g async for g in ec.run_batch(s, groups=True, execution="group")]

    [g] = await asyncio.wait_for(run(), 120)
    assert g.retried == 0 and g.advantages() == [None, None]
    assert [(r.termination, r.config_error) for r in g.results] == [("workflow_failed", True)] * 2
    error = g.results[0].error or ""
    assert "execution: episode" in error and "fewer samples" in error and "\n" not in error
    assert await wait_until(lambda: worker.groups.members == 0, timeout=30)


async def test_a_workers_max_sessions_holds_with_groups_larger_than_it(client) -> None:
    """A worker holding at most 2 sessions takes two groups of 3 members (each member's
    harness takes a second to start): at no moment does it hold more than 2 live
    sessions (its registry's and its groups' members), and both groups finish."""
    from workers.worker import EpisodeWorker, WorkerOptions

    queue = f"gx-cap-{uuid.uuid4().hex[:6]}"
    w = EpisodeWorker(
        client, WorkerOptions(task_queue=queue, max_sessions=2, provision_breaker_after=0)
    )
    running = asyncio.create_task(w.run())
    peak = 0
    done = asyncio.Event()

    async def watch() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, len(w.registry) + w.groups.members)
            await asyncio.sleep(0.01)

    watcher = asyncio.create_task(watch())
    slow = scripted_command("slow-start", "delay=1")
    tasks = [{"id": t, "data": {"messages": ["x"], "expected": ["x"]}} for t in "ab"]
    s = spec(name=f"gx-cap-{uuid.uuid4().hex[:6]}", command=slow, tasks=tasks, samples=3)
    s = s.model_copy(update={"harness": s.harness.model_copy(update={"ready_timeout_s": 30})})
    ec = EpisodesClient(client, task_queue=queue)
    try:
        run = ec.run_batch(s, groups=True, execution="group", concurrency=6)
        groups = await asyncio.wait_for(_collect(run), 180)
    finally:
        done.set()
        await watcher
        w.request_stop()
        await asyncio.wait_for(running, 30)
    assert sorted(g.task_id for g in groups) == ["a", "b"]
    for g in groups:
        assert [(r.termination, r.reward) for r in g.results] == [("env_done", 1.0)] * 3
    assert 0 < peak <= 2, peak


async def _collect(agen) -> list:
    return [x async for x in agen]


async def test_group_members_claim_warm_boxes(client, worker) -> None:
    # A group's members are sessions of the worker like any episode's: a spec's warm
    # boxes serve them too (the first group fills the pool, the second claims).
    s = spec(name=f"gw-{uuid.uuid4().hex[:6]}", samples=2, pool={"warm": 2, "ttl_s": 30})
    ec = EpisodesClient(client, task_queue=QUEUE)
    before = worker.pools.warm_stats
    first = [g async for g in ec.run_batch(s, groups=True, execution="group")]
    assert {r.termination for g in first for r in g.results} == {"env_done"}
    assert await wait_until(lambda: worker.pools.warm_stats.ready >= 2, timeout=60)
    again = [
        g async for g in ec.run_batch(s, groups=True, execution="group", batch_id=f"{s.name}-2")
    ]
    assert {r.termination for g in again for r in g.results} == {"env_done"}
    after = worker.pools.warm_stats
    assert after.claimed - before.claimed >= 2 and after.cold - before.cold >= 1
