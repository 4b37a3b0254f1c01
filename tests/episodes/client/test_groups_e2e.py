"""Groups streamed whole, policy versions and staleness, with real parts: a Temporal dev
server and worker, the LLM harness, the model proxy and the scripted upstream over
HTTP (its `gate` holds chosen calls, so "not complete when the version moves" is the
test's doing, not timing). A real infrastructure failure: a Docker box whose image
does not exist (provision fails for a non-harness reason)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from episodes.agents.chat_template import ChatTemplate
from episodes.agents.scripted import ScriptedUpstream, kv_policy
from episodes.client import EpisodesClient
from episodes.client.batches import batch_input, start_batch
from episodes.client.sync import SyncEpisodesClient
from episodes.errors import EpisodesError
from episodes.types.results import EpisodeResult
from episodes.types.spec import parse_spec
from tests.episodes.agents.test_agent_session import UPSTREAM_KEY, agent_spec
from tests.episodes.cli.test_cli import episodes as cli
from tests.episodes.cli.test_cli import write_spec
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
        agen = ec.run_batch(s, groups=True, policy_version=0, max_staleness=1, concurrency=4)
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
        up.always_fail = 503
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
