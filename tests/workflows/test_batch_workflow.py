"""EvalBatchWorkflow on real dev servers with real workers and real harness processes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import yaml
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import is_cancelled_exception
from temporalio.worker import Replayer

from episodes.client import EpisodesClient
from episodes.client.batch.server import batch_input, query_progress, start_batch, wait_batch
from episodes.client.connect import connect
from episodes.client.devserver import DevServer
from episodes.contract import batch_workflow_id
from episodes.payloads.settings import configured_data_converter
from episodes.types.io import BatchProgress
from episodes.types.metrics import BatchMetrics
from episodes.types.results import EpisodeResult
from tests.conftest import scripted_command
from tests.episodes.cli.test_cli import episodes
from tests.support.helpers import spec, wait_until
from workflows.batch import EvalBatchWorkflow

CAN_QUEUE = "batch-can"
QUEUE = "episodes-test"
# Low enough that a 300-episode batch continues-as-new several times.
SUGGEST_CAN_AT = 200


@pytest.fixture(scope="module")
def can_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    tmp = tmp_path_factory.mktemp("temporal-can")
    server = DevServer(
        auto_port=True,
        headless=True,
        db_file=tmp / "temporal.db",
        log_file=tmp / "server.log",
        extra_dynamic_config={"limit.historyCount.suggestContinueAsNew": str(SUGGEST_CAN_AT)},
    )
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
async def can_client(can_server):  # type: ignore[no-untyped-def]
    return await connect(can_server.address, timeout_s=30)


@pytest.fixture(scope="module")
async def can_worker(can_client) -> AsyncIterator[Any]:
    from workers.worker import EpisodeWorker, WorkerOptions

    w = EpisodeWorker(can_client, WorkerOptions(task_queue=CAN_QUEUE, reap_interval_s=2))
    task = asyncio.create_task(w.run())
    yield w
    w.request_stop()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait_for(task, 30)


# Four kinds of task with rewards known in advance (the echo harness repeats each message):
KINDS: list[dict[str, Any]] = [
    {"messages": ["a", "b"], "expected": ["a", "b"]},  # reward 1, env_done
    {"messages": ["a", "b"], "expected": ["a", "x"]},  # reward 0.5, env_done
    {"messages": ["a"], "expected": ["z"]},  # reward 0, env_done
    {"messages": ["a", "b", "c"], "expected": ["a", "b", "c"]},  # max_turns=2: 2/3
]
KIND_REWARD = [1.0, 0.5, 0.0, 2 / 3]


def kind_tasks(n: int) -> list[dict[str, Any]]:
    return [{"id": f"t{i:03d}", "data": KINDS[i % 4]} for i in range(n)]


async def count(client, query: str) -> int:  # type: ignore[no-untyped-def]
    return (await client.count_workflows(query)).count


async def settled_count(client, query: str, expected: int) -> int:  # type: ignore[no-untyped-def]
    """Visibility lags behind completion: wait for `expected`, then report what is there."""
    await wait_until(lambda: _at_least(client, query, expected), timeout=30, interval=0.25)
    return await count(client, query)


async def _at_least(client, query: str, n: int) -> bool:  # type: ignore[no-untyped-def]
    return await count(client, query) >= n


@pytest.mark.slow
async def test_300_episodes_continue_as_new_metrics_by_hand(can_client, can_worker) -> None:
    n_tasks, samples = 100, 3
    total = n_tasks * samples
    s = spec(name=f"can-{uuid.uuid4().hex[:6]}", tasks=kind_tasks(n_tasks), max_turns=2)
    s = s.model_copy(update={"samples": samples})
    handle = await start_batch(can_client, batch_input(s, concurrency=24), task_queue=CAN_QUEUE)
    assert handle.id == batch_workflow_id(s.name)
    seen: list[BatchProgress] = []
    result = await asyncio.wait_for(wait_batch(can_client, handle, on_progress=seen.append), 240)

    # Queried while running: partial progress, and from a later run of the chain.
    assert any(0 < p.done < total for p in seen)
    assert any(p.runs > 1 for p in seen)
    assert all(p.batch == s.name and p.total == total for p in seen)

    # It really continued-as-new: every run is its own execution under the same id.
    assert result.runs >= 3, result.runs
    runs = await settled_count(can_client, f"WorkflowId = '{handle.id}'", result.runs)
    assert runs == result.runs
    # Every run keeps the batch's search attributes.
    assert (
        await count(can_client, f"EpisodeBatch = '{s.name}' AND WorkflowType = 'EvalBatchWorkflow'")
        == runs
    )

    # Every episode ran exactly once: one execution per id, all completed.
    query = f"EpisodeBatch = '{s.name}' AND WorkflowType = 'EpisodeWorkflow'"
    assert await settled_count(can_client, query, total) == total
    assert (
        await settled_count(can_client, query + " AND ExecutionStatus = 'Completed'", total)
        == total
    )

    m = result.metrics
    per_kind = n_tasks // 4 * samples  # 75 episodes of each kind
    assert m.count == total
    assert m.rewarded == total
    assert m.mean_reward == pytest.approx(per_kind * sum(KIND_REWARD) / total)
    assert m.passed == per_kind  # only kind 0 reaches the default threshold 1.0
    # The echo harness is deterministic: a task passes all its samples or none.
    assert m.pass_at_k == {k: pytest.approx(0.25) for k in (1, 2, 3)}
    assert m.pass_at_k_tasks == {1: n_tasks, 2: n_tasks, 3: n_tasks}
    assert m.terminations == {"env_done": 3 * per_kind, "max_turns": per_kind}
    d = m.duration_s
    assert d.min is not None and d.max is not None and d.p50 is not None
    assert 0 < d.min <= d.p50 <= d.p90 <= d.p99 <= d.max  # type: ignore[operator]
    assert result.errors == []

    # The `metrics` query of the finished batch agrees with its result.
    latest = can_client.get_workflow_handle(handle.id)
    assert await latest.query("metrics", result_type=BatchMetrics) == m
    assert len(can_worker.registry) == 0  # every session released

    # Every run of the chain replays deterministically from its recorded history.
    replayer = Replayer(
        workflows=[EvalBatchWorkflow], data_converter=configured_data_converter(), debug_mode=True
    )
    async for wf in can_client.list_workflows(f"WorkflowId = '{handle.id}'"):
        history = await can_client.get_workflow_handle(wf.id, run_id=wf.run_id).fetch_history()
        await replayer.replay_workflow(history)


async def test_cancelling_a_batch_cancels_its_episodes(client, worker) -> None:
    s = spec(
        name=f"cancel-{uuid.uuid4().hex[:6]}",
        command=scripted_command("hang", "turn=0"),  # never answers the first turn
        tasks=kind_tasks(6),
        turn_timeout_s=120.0,
    )
    handle = await start_batch(client, batch_input(s, concurrency=4), task_queue=QUEUE)
    query = f"EpisodeBatch = '{s.name}' AND WorkflowType = 'EpisodeWorkflow'"

    async def four_in_a_turn() -> bool:
        p = await query_progress(client, handle.id)
        return p is not None and p.running == 4 and len(worker.registry) >= 4

    assert await wait_until(four_in_a_turn, timeout=60, interval=0.2)
    await handle.cancel()
    with pytest.raises(WorkflowFailureError) as info:
        await asyncio.wait_for(handle.result(), 60)
    assert is_cancelled_exception(info.value.cause)
    # The four it had started ended as `cancelled` (and released); the rest never started.
    assert await settled_count(client, query, 4) == 4
    assert await wait_until(lambda: _none_running(client, query), timeout=30)
    results = [
        await client.get_workflow_handle(wf.id, result_type=EpisodeResult).result()
        async for wf in client.list_workflows(query)
    ]
    assert [r.termination for r in results] == ["cancelled"] * 4
    assert await wait_until(lambda: len(worker.registry) == 0, timeout=30)


async def _none_running(client, query: str) -> bool:  # type: ignore[no-untyped-def]
    return await count(client, query + " AND ExecutionStatus = 'Running'") == 0


async def test_rerun_reuses_episodes_that_already_ran(client, worker) -> None:
    """A batch over episode ids that exist awaits their results instead of re-running them."""
    s = spec(name=f"reuse-{uuid.uuid4().hex[:6]}", tasks=kind_tasks(3))
    s = s.model_copy(update={"samples": 2})
    ec = EpisodesClient(client, task_queue=QUEUE)
    before = [r async for r in ec.run_batch(s)]  # client-side fan-out, batch id = spec name
    assert len(before) == 6
    query = f"EpisodeBatch = '{s.name}' AND WorkflowType = 'EpisodeWorkflow'"
    assert await settled_count(client, query, 6) == 6

    handle = await start_batch(client, batch_input(s), task_queue=QUEUE)
    result = await asyncio.wait_for(wait_batch(client, handle), 120)
    assert result.metrics.count == 6
    assert result.metrics.mean_reward == pytest.approx(2 * sum(KIND_REWARD[:3]) / 6)
    assert result.errors == []
    # Each result came from the episode that already existed, through `await_episode`.
    history = await handle.fetch_history()
    awaited = [
        e
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == "await_episode"
    ]
    assert len(awaited) == 6
    # Still six episode executions: none ran a second time.
    await asyncio.sleep(1)
    assert await count(client, query) == 6
    # The batch's own id: starting it again attaches to the finished one.
    again = await start_batch(client, batch_input(s), task_queue=QUEUE)
    assert (await wait_batch(client, again)) == result


async def test_cli_run_batch_with_a_failing_episode(tmp_path, dev_server, worker) -> None:
    name = f"clibatch-{uuid.uuid4().hex[:6]}"
    tasks = [
        {"id": "good", "data": KINDS[0]},
        {"id": "half", "data": KINDS[1]},
        # The script env rejects a task without messages in reset(): the episode ends
        # env_error, unscored (env code that raises is an outcome, not a failed workflow).
        {"id": "broken", "data": {"nothing": True}},
    ]
    data = {
        "name": name,
        "env": "script",
        "tasks": tasks,
        "samples": 2,
        "harness": {"command": "{python} -m episodes.harness.reference.echo"},
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    out = tmp_path / "results.jsonl"
    args = ["run", str(path), "--batch", "--address", dev_server.address]
    args += ["--task-queue", QUEUE, "--out", str(out), "--pass-threshold", "0.5"]
    code, stdout, stderr = await episodes(*args)
    assert code == 0, stderr + stdout
    assert f"batch.{name}" in stdout
    assert "pass@1" in stdout and "pass@2" in stdout
    assert "env_error" in stdout
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted((r["task_id"], r["sample"]) for r in lines) == [
        ("broken", 0),
        ("broken", 1),
        ("good", 0),
        ("good", 1),
        ("half", 0),
        ("half", 1),
    ]
    # The failure is named, with its root cause, and never scored.
    broken = [r for r in lines if r["task_id"] == "broken"]
    assert {r["termination"] for r in broken} == {"env_error"}
    assert all(r["reward"] is None for r in broken)
    assert "script env: task 'broken': data.messages must be" in broken[0]["error"]

    c = await connect(dev_server.address)
    latest = c.get_workflow_handle(batch_workflow_id(name))
    m = await latest.query("metrics", result_type=BatchMetrics)
    assert m.count == 6
    assert m.terminations == {"env_done": 4, "env_error": 2}
    assert m.rewarded == 4 and m.mean_reward == pytest.approx(0.75)
    # Threshold 0.5: good and half pass every sample, broken none.
    assert m.passed == 4
    assert m.pass_at_k == {1: pytest.approx(2 / 3), 2: pytest.approx(2 / 3)}

    # Running the same command again re-attaches to the finished batch.
    code, stdout2, stderr = await episodes(*args[:-4])
    assert code == 0, stderr + stdout2
    assert "env_error" in stdout2
    query = f"EpisodeBatch = '{name}' AND WorkflowType = 'EpisodeWorkflow'"
    assert await settled_count(c, query + " AND ExecutionStatus = 'Completed'", 6) == 6
