"""Batches sharing the workers (issue 31): priority, fairness and budgets.

A real dev server (the session's: `matching.enableFairness` is among the dev server's
flags, `episodes.client.devserver.TUNING_FLAGS`), and per test one worker of its own
whose live sessions are capped, so provisions queue up on the server and the queue's
order decides who runs. Orders are read afterwards from the episodes' close times
(with one session at a time, an episode closes before the next one provisions):
nothing here waits on a clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from typing import Any

import pytest
from temporalio.client import Client

from episodes import contract
from episodes import search_attributes as sa
from episodes.client import EpisodesClient
from episodes.client.batch.server import batch_input, start_batch, wait_batch
from episodes.client.connect import connect
from episodes.client.devserver import DevServer
from episodes.model.scripted.server import ScriptedUpstream, echo_policy
from episodes.ops.doctor import check_priority
from episodes.types.priority import BatchBudget
from episodes.types.spec import EpisodeSpec
from episodes.viewer.pages import _batch, batch_view
from tests.conftest import ROOT
from tests.support.helpers import spec, wait_until

pytestmark = pytest.mark.timeout(300)

CHATTY = [sys.executable, str(ROOT / "tests" / "support" / "harnesses" / "chatty_harness.py")]


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


@contextlib.asynccontextmanager
async def capped_worker(client: Client, max_sessions: int) -> AsyncIterator[str]:
    """A worker of our own on a fresh queue, at most `max_sessions` live sessions."""
    from workers.worker import EpisodeWorker, WorkerOptions

    queue = _name("fleet")
    w = EpisodeWorker(
        client,
        WorkerOptions(
            task_queue=queue,
            max_sessions=max_sessions,
            reap_interval_s=2,
            provision_breaker_after=0,
        ),
    )
    task = asyncio.create_task(w.run())
    try:
        yield queue
    finally:
        w.request_stop()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 60)


def _batch_spec(name: str, n: int, **over: Any) -> EpisodeSpec:
    """n one-turn echo episodes, all in flight at once (the worker's cap queues them)."""
    tasks = [{"id": f"t{i:02d}", "data": {"messages": ["a"]}} for i in range(n)]
    return spec(name=name, tasks=tasks, concurrency=n, **over)


async def _all_queued(client: Client, batch: str, n: int) -> bool:
    """All n episodes of the batch exist and each has an activity scheduled (its
    provision, unless it got further) or has finished: the queue holds its backlog."""
    query = f"{sa.BATCH.name} = '{batch}' AND WorkflowType = '{contract.EPISODE_WORKFLOW}'"
    runs = [wf async for wf in client.list_workflows(query)]
    if len(runs) < n:
        return False

    async def queued(wid: str) -> bool:
        desc = await client.get_workflow_handle(wid).describe()
        return desc.close_time is not None or bool(desc.raw_description.pending_activities)

    return all(await asyncio.gather(*(queued(wf.id) for wf in runs)))


async def _close_times(client: Client, batch: str) -> list[datetime]:
    query = f"{sa.BATCH.name} = '{batch}' AND WorkflowType = '{contract.EPISODE_WORKFLOW}'"
    times = [wf.close_time async for wf in client.list_workflows(query)]
    return sorted(t for t in times if t is not None)


async def _closed(client: Client, batch: str, n: int) -> bool:
    return len(await _close_times(client, batch)) >= n


async def test_a_priority_1_batch_overtakes_a_backlogged_priority_5_batch(client) -> None:
    """The 40 queue up behind 2 sessions whose model calls the upstream holds until
    the 6 are queued too: how many of the 40 ran before is the test's doing, not the
    machine's speed (under load, a free-running backlog finished 14 while the test
    was still waiting for the 40 to show as queued)."""
    release = asyncio.Event()

    async def gate(request: dict[str, Any]) -> None:
        await release.wait()

    async with (
        capped_worker(client, max_sessions=2) as queue,
        ScriptedUpstream(policy=echo_policy, gate=gate) as up,
    ):
        bulk = _chatty(up, _name("bulk"), 40, priority=5).model_copy(update={"concurrency": 40})
        evals = _batch_spec(_name("evals"), 6, priority=1)
        bulk_h = await start_batch(client, batch_input(bulk), task_queue=queue)
        try:
            # Its 40 episodes started: 2 hold the sessions, the rest wait in the queue.
            assert await wait_until(lambda: len(up.chat_requests) == 2, timeout=60)
            assert await wait_until(lambda: _all_queued(client, bulk.name, 40), timeout=60)
            evals_h = await start_batch(client, batch_input(evals), task_queue=queue)
            assert await wait_until(lambda: _all_queued(client, evals.name, 6), timeout=60)
        finally:
            release.set()
        evals_result = await asyncio.wait_for(wait_batch(client, evals_h), 120)
        assert evals_result.metrics.count == 6
        assert evals_result.metrics.terminations == {"env_done": 6}
        bulk_result = await asyncio.wait_for(wait_batch(client, bulk_h), 180)
        assert bulk_result.metrics.count == 40
        assert bulk_result.metrics.terminations == {"env_done": 40}
        assert await wait_until(lambda: _closed(client, evals.name, 6), timeout=30)
        assert await wait_until(lambda: _closed(client, bulk.name, 40), timeout=30)
    evals_done_at = (await _close_times(client, evals.name))[-1]
    bulk_before = [t for t in await _close_times(client, bulk.name) if t <= evals_done_at]
    # The bound of the issue: the 6 are done before a third of the 40 are. (First come,
    # first served, they would wait for all 40; here about the 2 that held the sessions.)
    assert len(bulk_before) < 40 / 3, f"{len(bulk_before)} of the 40 finished first"
    assert (await batch_view(client, evals.name))["fleet"]["priority"] == 1
    # Findable by priority: the batch and each of its episodes.
    for batch, priority, n in ((bulk.name, 5, 41), (evals.name, 1, 7)):
        query = f"{sa.BATCH.name} = '{batch}' AND {sa.PRIORITY.name} = {priority}"
        assert (await client.count_workflows(query)).count == n


async def test_fairness_keys_share_a_saturated_worker_by_weight(client) -> None:
    """Weights 3:1. The weight-1 batch is queued first: first come, first served would
    run (nearly) all of it before the other. Among the first 12 episodes provisioned
    once both are queued, the weight-3 batch gets at least 7 (3:1 is 9; bound: better
    than 1:1) and the weight-1 batch at least 1 (it is not starved)."""
    n = 20
    async with capped_worker(client, max_sessions=1) as queue:
        light = _batch_spec(_name("light"), n, fairness_key="light", fairness_weight=1.0)
        heavy = _batch_spec(_name("heavy"), n, fairness_key="heavy", fairness_weight=3.0)
        light_h = await start_batch(client, batch_input(light), task_queue=queue)
        assert await wait_until(lambda: _all_queued(client, light.name, n), timeout=60)
        heavy_h = await start_batch(client, batch_input(heavy), task_queue=queue)
        assert await wait_until(lambda: _all_queued(client, heavy.name, n), timeout=60)
        both_queued = datetime.now().astimezone()
        for h in (light_h, heavy_h):
            assert (await asyncio.wait_for(wait_batch(client, h), 180)).metrics.count == n
        for b in (light.name, heavy.name):
            assert await wait_until(lambda b=b: _closed(client, b, n), timeout=30)
    order = sorted(
        [(t, "light") for t in await _close_times(client, light.name)]
        + [(t, "heavy") for t in await _close_times(client, heavy.name)]
    )
    # The episode running when the second batch was queued came before: skip it.
    after = [who for t, who in order if t > both_queued][1:13]
    query = f"{sa.FAIRNESS.name} = 'heavy' AND {sa.BATCH.name} = '{heavy.name}'"
    assert (await client.count_workflows(query)).count == n + 1  # the batch and its episodes
    heavy_share = after.count("heavy")
    assert 7 <= heavy_share <= 11, f"first 12 after both queued: {after}"


def _chatty(upstream: ScriptedUpstream, name: str, n: int, **over: Any) -> EpisodeSpec:
    """n one-turn episodes of one model call each: the same tokens every time."""
    tasks = [{"id": f"t{i}", "data": {"messages": ["same"]}} for i in range(n)]
    return spec(
        name=name,
        tasks=tasks,
        command=CHATTY,
        # A call the upstream holds waits, it does not time out.
        harness={"env": {"CHATTY_CALLS": "1", "CHATTY_TIMEOUT_S": "240"}, "ready_timeout_s": 30},
        model={"base_url": upstream.base_url, "model": "scripted"},
        concurrency=1,
        **{"turn_timeout_s": 240, **over},
    )


async def _episodes_of(client: Client, batch: str) -> int:
    query = f"{sa.BATCH.name} = '{batch}' AND WorkflowType = '{contract.EPISODE_WORKFLOW}'"
    return (await client.count_workflows(query)).count


async def test_a_token_budget_stops_the_batch_and_a_rerun_does_not_start_over(client) -> None:
    async with (
        capped_worker(client, max_sessions=4) as queue,
        ScriptedUpstream(policy=echo_policy) as upstream,
    ):
        ec = EpisodesClient(client, task_queue=queue)
        probe = _chatty(upstream, _name("probe"), 1)
        one = await ec.run_episode(probe, probe.tasks[0])
        assert one.termination == "env_done", one.error
        assert one.model_calls == 1 and one.model_tokens > 0
        per_episode = one.model_tokens
        # Reached during the third episode: the batch starts no fourth.
        budget = BatchBudget(max_model_tokens=3 * per_episode - 1)

        # The batch workflow, continuing as new after every episode: the count goes on
        # from run to run (the accumulator travels with continue-as-new).
        s = _chatty(upstream, _name("budget"), 8, budget=budget.model_dump())
        inp = batch_input(s).model_copy(update={"children_per_run": 1})
        result = await wait_batch(client, await start_batch(client, inp, task_queue=queue))
        assert (result.status, result.budget) == ("budget_exhausted", "max_model_tokens")
        assert result.runs == 3
        assert result.metrics.count == 3 and result.total == 8
        assert result.metrics.model_tokens == 3 * per_episode
        assert result.metrics.model_calls == 3
        # Run again: the same batch, attached to, not started over.
        again = await wait_batch(client, await start_batch(client, inp, task_queue=queue))
        assert again == result
        assert await wait_until(lambda: _episodes_of_is(client, s.name, 3), timeout=30)
        # The viewer's batch page shows the status, the budget and the spending.
        fleet = (await batch_view(client, s.name))["fleet"]
        assert fleet["status"] == "budget_exhausted" and fleet["budget"] == "max_model_tokens"
        assert (fleet["model_tokens"], fleet["model_calls"]) == (3 * per_episode, 3)
        assert "budget_exhausted" in _batch(await batch_view(client, s.name))

        # A client's stream (`episodes run`): the same stop; a restarted trainer re-attaches
        # to the three that ran, counts them, and starts no fourth.
        c = _chatty(upstream, _name("stream"), 8)
        for _ in range(2):
            results = [r async for r in ec.run_batch(c, budget=budget)]
            assert [r.task_id for r in results] == ["t0", "t1", "t2"]
            assert ec.budget_exhausted == "max_model_tokens"
        assert await wait_until(lambda: _episodes_of_is(client, c.name, 3), timeout=30)
        # Without a budget the stream runs them all (the re-run goes on from there).
        rest = [r async for r in ec.run_batch(c)]
        assert len(rest) == 8 and ec.budget_exhausted is None
    assert len(upstream.chat_requests) == 1 + 3 + 3 + 5


async def test_a_budget_stops_only_its_own_stream_on_a_shared_client(client) -> None:
    """A trainer's one client running a budgeted batch beside an unbudgeted one: the
    budget stopped both (it was the client's, not the stream's)."""
    async with (
        capped_worker(client, max_sessions=4) as queue,
        ScriptedUpstream(policy=echo_policy) as upstream,
    ):
        ec = EpisodesClient(client, task_queue=queue)
        capped = _chatty(upstream, _name("capped"), 4)
        free = _chatty(upstream, _name("free"), 4)

        async def run(s: EpisodeSpec, **kw: Any) -> list[Any]:
            return [r async for r in ec.run_batch(s, concurrency=1, **kw)]

        one_call = BatchBudget(max_model_calls=1)
        capped_results, free_results = await asyncio.gather(run(capped, budget=one_call), run(free))
    assert [r.task_id for r in capped_results] == ["t0"]
    assert [r.task_id for r in free_results] == ["t0", "t1", "t2", "t3"]


async def _episodes_of_is(client: Client, batch: str, n: int) -> bool:
    # Settles at n (visibility lags a moment); more would be an episode started over.
    return await _episodes_of(client, batch) == n


@pytest.fixture(scope="module")
def unfair_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    """A dev server with the fairness-aware matcher turned off (as a server's default)."""
    tmp = tmp_path_factory.mktemp("temporal-unfair")
    server = DevServer(
        auto_port=True,
        headless=True,
        db_file=tmp / "temporal.db",
        log_file=tmp / "server.log",
        extra_dynamic_config={"matching.enableFairness": "false"},
    )
    server.start()
    yield server
    server.stop()


async def test_doctor_says_whether_the_server_honours_priority_and_fairness(
    client, unfair_server
) -> None:
    checks = {c.name: c for c in await check_priority(client)}
    assert checks["priority"].ok and checks["fairness"].ok, checks
    unfair = await connect(unfair_server.address, timeout_s=30)
    checks = {c.name: c for c in await check_priority(unfair)}
    assert checks["priority"].ok, checks["priority"]
    assert not checks["fairness"].ok
    assert "served in arrival order" in checks["fairness"].line()
    assert "matching.enableFairness: true" in checks["fairness"].line()
    assert not checks["fairness"].failed  # shown, not a failure of the configuration


@pytest.mark.parametrize("server_batch", [False, True], ids=["client", "batch-workflow"])
async def test_episodes_run_says_which_budget_stopped_it(
    tmp_path, dev_server, client, worker, server_batch
) -> None:
    from tests.episodes.cli.test_cli import episodes, write_spec

    name = _name("cli-budget")
    data = {
        "name": name,
        "env": "script",
        "tasks": [{"id": f"t{i}", "data": {"messages": ["x"]}} for i in range(4)],
        "harness": {"command": ["{python}", "-m", "episodes.harness.reference.echo"]},
        "concurrency": 1,
    }
    args = ["run", str(write_spec(tmp_path, data)), "--address", dev_server.address]
    args += ["--task-queue", "episodes-test", "--max-episode-seconds", "0.001"]
    code, out, err = await episodes(*args, *(["--on-server"] if server_batch else []))
    assert code == 0, out + err
    assert "budget_exhausted: max_episode_seconds reached; 1 of 4 episodes ran" in out
    assert await wait_until(lambda: _episodes_of_is(client, name, 1), timeout=30)
