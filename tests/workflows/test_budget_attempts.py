"""Batch budgets count every attempt (issue 40 §4): an episode run again after an
infrastructure failure spent its tokens, and so did an episode whose workflow failed
after it recorded turns. Both batches count them: EvalBatchWorkflow (`--on-server`)
and the client's `run_batch`, against stand-in activities on the time-skipping server.

Each drive records one turn holding one model call of 100 tokens. Task `a`'s first
attempt then ends for an infrastructure reason (`model_error`: a flaky upstream) or
its drive breaks (the workflow fails); task `b` comes after it (concurrency 1). With a
budget of 150 tokens (100 when `a` runs once), `a` alone spends it: `b` must never
start.
"""

from __future__ import annotations

import uuid
from typing import Any

from temporalio.exceptions import ApplicationError

from episodes import contract
from episodes.client import EpisodesClient
from episodes.types.io import BatchInput, BatchResult, DriveInput, DriveResult
from episodes.types.results import (
    WORKFLOW_FAILED,
    ScoreResult,
    StepOutcome,
    TurnRecord,
    TurnResult,
)
from tests.workflows.standins import StandIns, spec

TOKENS = 100
CALL = {"kind": "model_call", "usage": {"prompt_tokens": 60, "completion_tokens": 40}}


class Flaky(StandIns):
    """Every drive records one turn of one 100-token model call; task a's first attempt
    then ends `model_error` (`fail="infra"`) or breaks (`fail="workflow"`)."""

    def __init__(self, client: Any, fail: str) -> None:
        super().__init__(client)
        self.fail = fail
        self.drives: list[str] = []

    async def on_drive(self, inp: DriveInput) -> DriveResult:
        self.drives.append(inp.workflow_id)
        turn = TurnResult(
            record=TurnRecord(turn=0, message="m0", events=[CALL], reply="r0"),
            observation=StepOutcome(message="m1", done=True),
        )
        await self.record(inp, [turn])
        first_of_a = ".a.s0" in inp.workflow_id and not inp.workflow_id.endswith(".r1")
        if first_of_a and self.fail == "workflow":
            raise ApplicationError("a bug in the drive", type="Bug", non_retryable=True)
        termination = "model_error" if first_of_a else "env_done"
        return DriveResult(termination=termination, next_turn=1, score=ScoreResult(reward=1.0))


def _spec(name: str, retries: int) -> Any:
    budget = 150 if retries else TOKENS
    return spec(
        name=name,
        tasks=[{"id": "a"}, {"id": "b"}],
        concurrency=1,
        batch_retries=retries,
        budget={"max_model_tokens": budget},
    )


async def _server_batch(env: Any, s: StandIns, retries: int) -> BatchResult:
    batch = f"ba-{uuid.uuid4().hex[:6]}"
    return await env.client.execute_workflow(
        contract.BATCH_WORKFLOW,
        BatchInput(spec=_spec(batch, retries), batch=batch),
        id=contract.batch_workflow_id(batch),
        task_queue=s.shared_queue,
        result_type=BatchResult,
    )


async def test_the_server_batch_counts_an_attempt_run_again(env) -> None:
    s = Flaky(env.client, "infra")
    async with s.running():
        result = await _server_batch(env, s, retries=1)
    # a: two attempts of 100 tokens each, the first run again: 200 spent, b never starts.
    assert len(s.drives) == 2 and all(".a.s0" in d for d in s.drives)
    assert (result.status, result.budget) == ("budget_exhausted", "max_model_tokens")
    m = result.metrics
    assert (m.count, m.retried, m.model_tokens, m.model_calls) == (1, 1, 2 * TOKENS, 2)
    assert m.episode_seconds >= 0


async def test_the_server_batch_counts_what_a_failed_workflow_recorded(env) -> None:
    s = Flaky(env.client, "workflow")
    async with s.running():
        result = await _server_batch(env, s, retries=0)
    assert s.drives == [s.drives[0]] and ".a.s0" in s.drives[0]
    m = result.metrics
    assert m.terminations == {WORKFLOW_FAILED: 1}
    assert (m.model_tokens, m.model_calls) == (TOKENS, 1)
    assert result.status == "budget_exhausted"


async def _client_batch(env: Any, s: StandIns, retries: int) -> tuple[list[Any], EpisodesClient]:
    ec = EpisodesClient(env.client, task_queue=s.shared_queue)
    name = f"ca-{uuid.uuid4().hex[:6]}"
    return [r async for r in ec.run_batch(_spec(name, retries))], ec


async def test_the_client_batch_counts_an_attempt_run_again(env) -> None:
    s = Flaky(env.client, "infra")
    async with s.running():
        results, ec = await _client_batch(env, s, retries=1)
    assert len(s.drives) == 2 and all(".a.s0" in d for d in s.drives)
    assert [r.task_id for r in results] == ["a"]
    assert (results[0].retries, results[0].model_tokens) == (1, TOKENS)  # its own attempt
    assert ec.budget_exhausted == "max_model_tokens"


async def test_the_client_batch_counts_what_a_failed_workflow_recorded(env) -> None:
    s = Flaky(env.client, "workflow")
    async with s.running():
        results, ec = await _client_batch(env, s, retries=0)
    [a] = results
    assert a.termination == WORKFLOW_FAILED
    # The failed episode's record carries what it recorded, and the budget counts it.
    assert (a.model_tokens, a.model_calls) == (TOKENS, 1)
    assert ec.budget_exhausted == "max_model_tokens"
    assert len(s.drives) == 1
