"""EvalBatchWorkflow's logic against stand-in activities on the time-skipping test
server: its children are real EpisodeWorkflows on the same stand-ins."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError

from episodes import contract
from episodes.types.io import (
    BatchInput,
    BatchResult,
    DriveInput,
    DriveResult,
    EpisodeInput,
    ProvisionInput,
    SessionRef,
)
from episodes.types.results import WORKFLOW_FAILED, EpisodeResult, ScoreResult, Task
from tests.workflows.standins import StandIns, spec

TASKS = [Task(id="a", data={"reward": 1.0}), Task(id="b", data={"reward": 0.0}), Task(id="c")]


class Graded(StandIns):
    """Each task's drive ends with the reward its data names; task "c" breaks the drive
    (not an outcome: its episode's workflow fails). Counts drives in flight."""

    def __init__(self, client: Any) -> None:
        super().__init__(client)
        self.rewards: dict[str, float | None] = {}
        self.in_flight = 0
        self.most_in_flight = 0

    async def on_provision(self, inp: ProvisionInput) -> SessionRef:
        ref = await super().on_provision(inp)
        self.rewards[ref.session_id] = inp.task.data.get("reward")
        return ref

    async def on_drive(self, inp: DriveInput) -> DriveResult:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0.05)  # long enough for the others to start, if they may
        finally:
            self.in_flight -= 1
        reward = self.rewards[inp.session_id]
        if reward is None:
            raise ApplicationError("a bug in the drive", type="Bug", non_retryable=True)
        return DriveResult(termination="env_done", next_turn=1, score=ScoreResult(reward=reward))


async def run_batch(env, s: StandIns, batch: str, **inp: Any) -> BatchResult:
    return await env.client.execute_workflow(
        contract.BATCH_WORKFLOW,
        BatchInput.model_validate({"spec": spec(tasks=TASKS, samples=2), "batch": batch, **inp}),
        id=contract.batch_workflow_id(batch),
        task_queue=s.shared_queue,
        result_type=BatchResult,
    )


async def test_a_batch_runs_every_sample_within_its_concurrency_across_runs(env) -> None:
    s = Graded(env.client)
    async with s.running():
        result = await run_batch(
            env, s, f"b-{uuid.uuid4().hex[:6]}", concurrency=2, children_per_run=2
        )
    assert (result.total, result.runs) == (6, 3)  # 2 children per run, 6 children
    assert s.most_in_flight <= 2
    m = result.metrics
    assert (m.count, m.rewarded, m.mean_reward, m.passed) == (6, 4, 0.5, 2)
    assert m.terminations == {"env_done": 4, WORKFLOW_FAILED: 2}
    # Over the three tasks, a failed episode counting as a miss: only task a passes.
    assert m.pass_at_k == {1: pytest.approx(1 / 3), 2: pytest.approx(1 / 3)}
    # The failed episodes are named with their cause, and still released.
    assert len(result.errors) == 2
    assert all(".c.s" in e and "a bug in the drive" in e for e in result.errors)
    assert s.calls["release"] == 6


async def test_an_episode_that_already_ran_is_awaited_not_run_again(env) -> None:
    s = Graded(env.client)
    batch = f"b-{uuid.uuid4().hex[:6]}"
    one = spec(tasks=TASKS[:1])
    async with s.running():
        # A restarted trainer or batch: episode a#0 already finished under its id.
        await env.client.execute_workflow(
            contract.EPISODE_WORKFLOW,
            EpisodeInput(spec=one, task=TASKS[0], sample=0, batch=batch),
            id=contract.episode_id(batch, "a", 0),
            task_queue=s.shared_queue,
            result_type=EpisodeResult,
        )
        result = await env.client.execute_workflow(
            contract.BATCH_WORKFLOW,
            BatchInput(spec=one.model_copy(update={"samples": 2}), batch=batch),
            id=contract.batch_workflow_id(batch),
            task_queue=s.shared_queue,
            result_type=BatchResult,
        )
    assert (result.metrics.count, result.metrics.mean_reward) == (2, 1.0)
    assert s.calls["await_episode"] == 1
    assert s.calls["drive"] == 2  # a#0 once (before the batch), a#1 once
