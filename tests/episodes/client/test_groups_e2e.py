"""Groups streamed whole, policy versions and staleness, with real parts: a Temporal dev
server and worker, the LLM harness, the model proxy and the scripted upstream over
HTTP (its `gate` holds chosen calls, so "not complete when the version moves" is the
test's doing, not timing). A real infrastructure failure: a Docker box whose image
does not exist (provision fails for a non-harness reason)."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest
from temporalio.service import RPCError

from episodes.client import EpisodesClient
from episodes.client.batch.server import batch_input, start_batch
from episodes.client.blocking.client import SyncEpisodesClient
from episodes.errors import EpisodesError
from episodes.model.scripted.chat_template import ChatTemplate
from episodes.model.scripted.server import ScriptedUpstream, kv_policy
from episodes.types.results import EpisodeResult
from episodes.types.spec import parse_spec
from tests.episodes.cli.test_cli import episodes as cli
from tests.episodes.cli.test_cli import write_spec
from tests.episodes.session.test_agent_session import UPSTREAM_KEY, agent_spec
from tests.episodes.training.test_training import _addr, _visible
from tests.support.helpers import spec, wait_until

pytestmark = pytest.mark.timeout(300)

QUEUE = "episodes-test"
STEP = 120  # generous bound for one group to arrive
NO_BOX = {"runtime": {"type": "docker", "image": "episodes-no-such-image:none"}}


@pytest.fixture(autouse=True)
def _upstream_key(monkeypatch):
    monkeypatch.setenv("EPISODES_TEST_UPSTREAM_KEY", UPSTREAM_KEY)


def _kv(base_url: str, goals: dict[str, dict[str, str]], **over: Any) -> dict:
    data = agent_spec(base_url)
    data["name"] = f"groups-{uuid.uuid4().hex[:6]}"
    data["tasks"] = [{"id": t, "data": {"goal": g}} for t, g in goals.items()]
    data["samples"] = 2
    # The harness's environment is an allowlist: a worktree on PYTHONPATH reaches it too.
    data["harness"]["inherit_env"] = ["PYTHONPATH"]
    data["model"].update(cache_salt=True, policy_version=0)  # the salt names the version
    data.update(over)
    return data


def _versions(calls) -> set:
    return {c.policy_version for c in calls}


async def _next(agen):
    return await asyncio.wait_for(agen.__anext__(), STEP)


async def test_stale_groups_run_again_at_the_current_version(client, worker) -> None:
    """A group still running when the trainer moves two versions on is cancelled (its
    episodes end `cancelled` and release their sessions) and dispatched again at the
    current version; a group that completed is yielded with its own version."""
    release = asyncio.Event()

    async def gate(request: dict) -> None:
        # Task `late`'s calls at version 0 hang until the test ends: it cannot complete.
        late = ".late.s" in request["headers"].get("X-Session-ID", "")
        if late and request["body"].get("cache_salt") == "episodes-policy-0":
            await release.wait()

    up = ScriptedUpstream(policy=kv_policy, key=UPSTREAM_KEY, template=ChatTemplate(), gate=gate)
    ec = EpisodesClient(client, task_queue=QUEUE)
    async with up:
        s = parse_spec(_kv(up.base_url, {"early": {"a": "1"}, "late": {"z": "9"}}))
        agen = ec.run_batch(
            s,
            groups=True,
            policy_version=0,
            max_staleness=1,
            on_stale="requeue",
            concurrency=4,
        )
        try:
            first = await _next(agen)
            assert (first.task_id, first.policy_version, first.stale) == ("early", 0, 0)
            assert first.failed is None and [r.termination for r in first.results] == [
                "env_done",
                "env_done",
            ]
            held = [f"{s.name}.late.s{i}" for i in (0, 1)]
            ec.policy_version = 2  # the trainer moved on, two versions: `late` is stale
            second = await _next(agen)
            with pytest.raises(StopAsyncIteration):
                await _next(agen)
        finally:
            await agen.aclose()
            release.set()
    assert (second.task_id, second.policy_version, second.stale) == ("late", 2, 1)
    assert second.failed is None and all(r.reward == 1.0 for r in second.results)
    assert [r.workflow_id for r in second.results] == [f"{w}.r1" for w in held]
    for w in held:  # the stale attempts were cancelled, and released their sessions
        h = client.get_workflow_handle(w, result_type=EpisodeResult)
        assert (await asyncio.wait_for(h.result(), STEP)).termination == "cancelled"
    assert await wait_until(
        lambda: not {e.workflow_id for e in worker.registry.entries()} & set(held), timeout=30
    )
    # Every model call of the re-dispatched episodes carries the new version.
    for r in second.results:
        calls = (await ec.transcript(r.workflow_id)).model_calls()
        assert calls and _versions(calls) == {2}
    for r in first.results:
        assert _versions((await ec.transcript(r.workflow_id)).model_calls()) == {0}
    assert {r["body"]["cache_salt"] for r in up.chat_requests} >= {
        "episodes-policy-0",
        "episodes-policy-2",
    }
    # Samples come from the histories, split by nothing (one template, one version).
    built = await second.samples()
    assert [len(b.samples) for b in built] == [1, 1] and all(b.complete for b in built)
    assert second.advantages() == [0.0, 0.0]


async def test_a_group_past_its_retries_is_yielded_failed(client, worker) -> None:
    """Each member's provision fails for a non-harness reason (no such image): each runs
    again once as `.r1`, fails again, and the group comes out failed, whole."""
    s = spec(
        name=f"gfail-{uuid.uuid4().hex[:6]}",
        harness=NO_BOX,
        samples=2,
        group_retries=1,
        batch_retries=0,  # groups use their own budget
    )
    ec = EpisodesClient(client, task_queue=QUEUE)
    groups = [g async for g in ec.run_batch(s, groups=True)]
    [g] = groups
    assert g.failed is not None and ".r1: workflow_failed after 1 re-run(s)" in g.failed
    assert [r.workflow_id for r in g.results] == [f"{s.name}.t0.s{i}.r1" for i in (0, 1)]
    assert all(r.termination == "workflow_failed" for r in g.results)
    assert g.retried == 2 and g.advantages() == [None, None]
    assert g.group_id == f"{s.name}/t0"


async def test_a_model_upstream_that_gives_up_is_rerun_by_batches_and_groups(client, worker):
    """`model_error` (the proxy's retries exhausted) is the infrastructure's: the durable
    batch and a group both run the episode again as `.r1`, and count the group failed."""
    async with ScriptedUpstream(policy=kv_policy, key=UPSTREAM_KEY) as up:
        up.always_fail = 500  # (a 503 is backpressure: waited on, not charged to retries)
        data = _kv(up.base_url, {"ab": {"a": "1"}}, samples=1)
        data["model"]["retries"] = 0
        s = parse_spec(data)
        handle = await start_batch(client, batch_input(s), task_queue=QUEUE)
        result = await asyncio.wait_for(handle.result(), STEP)
        m = result.metrics
        assert m.terminations == {"model_error": 1}
        assert (m.infra_failures, m.retried, m.groups_failed, m.groups_complete) == (1, 1, 1, 0)

        ec = EpisodesClient(client, task_queue=QUEUE)
        [g] = [g async for g in ec.run_batch(s, groups=True, batch_id=f"{s.name}-client")]
    assert g.failed is not None and "model_error after 1 re-run(s)" in g.failed
    assert g.results[0].workflow_id == f"{s.name}-client.ab.s0.r1"


class _GroupClock:
    """`episodes.client.group.stream`' clock, in the test's hands: it stands still (no group
    gets older) until `need` members ended (the wrapped `run_member` returned), then
    reads past `group_timeout_s` from the second reading on in each run_batch's task:
    that loop has taken in every member that ended by then (its `asyncio.wait` in
    between returns every finished one). So the cut comes after the members that end
    and before nothing else: whatever the machine's load, and without waiting it out."""

    def __init__(self, need: int, timeout_s: float) -> None:
        self.need, self.timeout_s, self.ended = need, timeout_s, 0
        self.readings: dict[Any, int] = {}

    def monotonic(self) -> float:
        if self.ended < self.need:
            return 0.0
        task = asyncio.current_task()
        self.readings[task] = n = self.readings.get(task, 0) + 1
        return 0.0 if n < 2 else self.timeout_s + 1

    def counting(self, run_member: Any) -> Any:
        async def run(*args: Any, **kwargs: Any) -> Any:
            outcome = await run_member(*args, **kwargs)
            self.ended += 1
            return outcome

        return run


async def test_a_group_past_group_timeout_s_is_cut(client, worker, monkeypatch) -> None:
    """Task `slow`'s second member never gets a model answer: at `group_timeout_s` it is
    cancelled and its group comes out partial (the member that ended) or, with `drop`,
    not at all; the other group is whole. Both choices run at once. The groups'
    clock (`_GroupClock`) passes the timeout once the three other members of each
    batch ended: the straggler is the only one left, by construction."""
    from episodes.client.group import stream as groups

    timeout_s = 30.0
    clock = _GroupClock(need=6, timeout_s=timeout_s)
    monkeypatch.setattr(groups, "time", clock)
    monkeypatch.setattr(groups, "run_member", clock.counting(groups.run_member))
    release = asyncio.Event()
    up = ScriptedUpstream(
        policy=kv_policy, key=UPSTREAM_KEY, gate=_straggler_gate(".slow.s1", release)
    )
    async with up:
        specs = {}
        for on_timeout in ("partial", "drop"):
            data = _kv(up.base_url, {"quick": {"a": "1"}, "slow": {"z": "9"}})
            data.update(group_timeout_s=timeout_s, group_on_timeout=on_timeout)
            specs[on_timeout] = parse_spec(data)

        async def run(s: Any) -> list[Any]:
            ec = EpisodesClient(client, task_queue=QUEUE)
            return [g async for g in ec.run_batch(s, groups=True, concurrency=4)]

        try:
            partial, drop = await asyncio.gather(run(specs["partial"]), run(specs["drop"]))
        finally:
            release.set()
    for on_timeout, groups_ in (("partial", partial), ("drop", drop)):
        s = specs[on_timeout]
        by_task = {g.task_id: g for g in groups_}
        quick = by_task["quick"]
        assert not quick.partial and [r.termination for r in quick.results] == ["env_done"] * 2
        h = client.get_workflow_handle(f"{s.name}.slow.s1", result_type=EpisodeResult)
        cut = await asyncio.wait_for(h.result(), STEP)
        assert (cut.termination, cut.cut) == ("cancelled", "group_timeout")
        if on_timeout == "drop":
            assert list(by_task) == ["quick"]
            continue
        slow = by_task["slow"]
        assert slow.partial and slow.failed is None
        assert [(r.workflow_id, r.termination) for r in slow.results] == [
            (f"{s.name}.slow.s0", "env_done")
        ]
        assert slow.cut == [f"{s.name}.slow.s1"]


async def test_an_agent_failure_is_an_outcome_not_a_retry(client, worker) -> None:
    crash = ["{python}", "-c", "import sys; sys.exit(3)"]
    s = spec(name=f"gagent-{uuid.uuid4().hex[:6]}", command=crash, samples=2)
    [g] = [g async for g in EpisodesClient(client, task_queue=QUEUE).run_batch(s, groups=True)]
    assert g.failed is None and g.retried == 0
    assert [r.termination for r in g.results] == ["harness_start_failed"] * 2
    assert [r.workflow_id for r in g.results] == [f"{s.name}.t0.s{i}" for i in (0, 1)]


async def test_the_sync_client_streams_groups(dev_server, worker) -> None:
    tasks = [{"id": t, "data": {"messages": ["a"], "expected": ["a"]}} for t in ("x", "y")]
    s = spec(name=f"gsync-{uuid.uuid4().hex[:6]}", tasks=tasks, samples=3)

    def trainer() -> list:
        with SyncEpisodesClient.connect(dev_server.address, task_queue=QUEUE) as sc:
            got = []
            for g in sc.run_batch(s, groups=True):
                # No `model`: no samples, and samples() says why (never an empty list).
                with pytest.raises(EpisodesError, match="no episode made model calls") as e:
                    g.samples()
                got.append((g.task_id, g.failed, g.advantages(), str(e.value)))
            return got

    got = sorted(await asyncio.to_thread(trainer))
    assert [(t, f, a) for t, f, a, _ in got] == [("x", None, [0.0] * 3), ("y", None, [0.0] * 3)]
    assert f"group {s.name}/x: no episode made model calls" in got[0][3]
    assert "the spec needs a `model`" in got[0][3]


async def test_run_policy_version_reaches_every_model_call(client, worker, tmp_path) -> None:
    async with ScriptedUpstream(policy=kv_policy, key=UPSTREAM_KEY, template=ChatTemplate()) as up:
        data = _kv(up.base_url, {"ab": {"a": "1", "b": "2"}}, samples=1)
        path = write_spec(tmp_path, data)
        addr = ["--address", client.service_client.config.target_host, "--task-queue", QUEUE]
        code, out, err = await cli("run", str(path), "--policy-version", "5", *addr)
        assert code == 0, err + out
    ec = EpisodesClient(client, task_queue=QUEUE)
    calls = (await ec.transcript(f"{data['name']}.ab.s0")).model_calls()
    assert len(calls) == 3 and _versions(calls) == {5}

    data = _kv("http://127.0.0.1:1/v1", {"ab": {"a": "1"}})
    del data["model"]
    code, _, err = await cli(
        "run", str(write_spec(tmp_path, data, "nomodel.yaml")), "--policy-version", "1", *addr
    )
    assert code != 0 and "has no `model`" in err and "Traceback" not in err


def _straggler_gate(member: str, release: asyncio.Event):
    """Holds every model call of `member` (`.<task>.s<i>`) until `release`."""

    async def gate(request: dict) -> None:
        if member in request["headers"].get("X-Session-ID", ""):
            await release.wait()

    return gate


async def test_oversampled_groups_cut_the_straggler_and_export_leaves_it_out(
    client, worker, tmp_path
) -> None:
    """samples 2 + oversample 1: member s1 never gets a model answer. The group is
    yielded with s0 and s2 as soon as they ended; s1 is cut (its result says so, it
    ended `cancelled`) and `episodes export` writes no row of it."""
    release = asyncio.Event()
    gate = _straggler_gate(".ab.s1", release)
    up = ScriptedUpstream(policy=kv_policy, key=UPSTREAM_KEY, template=ChatTemplate(), gate=gate)
    ec = EpisodesClient(client, task_queue=QUEUE)
    async with up:
        s = parse_spec(_kv(up.base_url, {"ab": {"a": "1"}}))
        try:
            agen = ec.run_batch(s, groups=True, oversample=1, concurrency=3)
            groups = [g async for g in agen]
        finally:
            release.set()
        # The same batch again, one member at a time (s1 is asked for before s2 ends):
        # its members as they ended, the straggler not run again.
        again = [g async for g in ec.run_batch(s, groups=True, oversample=1, concurrency=1)]
    [g] = groups
    ids = [f"{s.name}.ab.s{i}" for i in range(3)]
    assert [r.workflow_id for r in g.results] == [ids[0], ids[2]]
    assert [r.termination for r in g.results] == ["env_done", "env_done"]
    assert (g.cut, g.partial, g.failed) == ([ids[1]], False, None)
    [g2] = again
    assert ([r.workflow_id for r in g2.results], g2.cut) == ([ids[0], ids[2]], [ids[1]])
    with pytest.raises(RPCError, match="not found"):
        await client.get_workflow_handle(f"{ids[1]}.r1").describe()
    h = client.get_workflow_handle(ids[1], result_type=EpisodeResult)
    cut = await asyncio.wait_for(h.result(), STEP)
    assert (cut.termination, cut.cut) == ("cancelled", "straggler")

    assert await wait_until(lambda: _visible(client, s.name, 3), timeout=60, interval=0.25)
    out = tmp_path / "samples.jsonl"
    code, stdout, err = await cli("export", s.name, "--out", str(out), *_addr(client))
    assert code == 0, err + stdout
    assert "left out 1 cut episode " in stdout
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted({r["episode_id"] for r in rows}) == [ids[0], ids[2]]
    assert {r["advantage"] for r in rows} == {0.0}


async def test_run_oversample_streams_groups_and_says_what_it_cut(client, worker, tmp_path):
    release = asyncio.Event()
    up = ScriptedUpstream(
        policy=kv_policy, key=UPSTREAM_KEY, gate=_straggler_gate(".ab.s0", release)
    )
    async with up:
        data = _kv(up.base_url, {"ab": {"a": "1"}})
        path = write_spec(tmp_path, data)
        addr = ["--address", client.service_client.config.target_host, "--task-queue", QUEUE]
        try:
            code, out, err = await cli("run", str(path), "--oversample", "1", *addr)
        finally:
            release.set()
        assert code == 0, err + out
        assert "groups: 1; 1 straggler episode cut (cancelled, never exported)" in out
        # The figures count what ran, and the bar counts groups: a group may hold more
        # than `samples` (members that ended together), so episodes read 9/8 in a run.
        assert f"{data['name']}: 2 episodes in 1 group" in out
        assert "1/1" in out
        # Oversampling is the client's: a batch workflow would run every member.
        code, out, err = await cli("run", str(path), "--oversample", "1", "--on-server", *addr)
    assert code != 0 and "drop --on-server" in err and "Traceback" not in err
    h = client.get_workflow_handle(f"{data['name']}.ab.s0", result_type=EpisodeResult)
    assert (await asyncio.wait_for(h.result(), STEP)).cut == "straggler"


async def test_zero_variance_groups_are_counted_and_can_be_skipped(client, worker) -> None:
    """Every sample of both tasks scores the same: the batch workflow counts both groups
    zero-variance; a groups stream flags them, or skips and counts them."""
    tasks = [
        {"id": "x", "data": {"messages": ["a"], "expected": ["a"]}},
        {"id": "y", "data": {"messages": ["a"], "expected": ["nope"]}},
    ]
    s = spec(name=f"gzv-{uuid.uuid4().hex[:6]}", tasks=tasks, samples=2)
    handle = await start_batch(client, batch_input(s), task_queue=QUEUE)
    m = (await asyncio.wait_for(handle.result(), STEP)).metrics
    assert (m.groups_complete, m.groups_zero_variance) == (2, 2)

    ec = EpisodesClient(client, task_queue=QUEUE)
    flagged = [g async for g in ec.run_batch(s, groups=True, batch_id=f"{s.name}-flag")]
    assert sorted((g.task_id, g.zero_variance) for g in flagged) == [("x", True), ("y", True)]
    assert ec.zero_variance_skipped == 0
    skip = ec.run_batch(s, groups=True, skip_zero_variance=True, batch_id=f"{s.name}-skip")
    assert [g async for g in skip] == [] and ec.zero_variance_skipped == 2
    assert ec.episodes_ran == 4  # the skipped groups' episodes ran all the same
