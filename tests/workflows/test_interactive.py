"""InteractiveEpisodeWorkflow's logic against stand-in activities on the time-skipping
test server: the idle timeout passes in skipped time, steps and closes are Updates."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from episodes import contract
from episodes.types.io import (
    InteractiveInput,
    ProvisionInput,
    ScoreInput,
    SessionOpened,
    SessionRef,
    StepInput,
    StepReply,
    TurnInput,
)
from episodes.types.results import EpisodeResult, ScoreResult, TurnResult
from tests.workflows.standins import HangsIn, StandIns, spec, task, turn_result


async def start(env, s: StandIns, **inp: Any) -> WorkflowHandle[Any, EpisodeResult]:
    return await env.client.start_workflow(
        contract.INTERACTIVE_WORKFLOW,
        InteractiveInput.model_validate({"spec": spec(), "task": task(), **inp}),
        id=f"session-{uuid.uuid4().hex[:8]}",
        task_queue=s.shared_queue,
        result_type=EpisodeResult,
    )


async def open_(handle: WorkflowHandle[Any, Any]) -> SessionOpened:
    return await handle.execute_update(contract.OPEN, result_type=SessionOpened)


async def step(handle: WorkflowHandle[Any, Any], n: int, message: Any = None) -> StepReply:
    return await handle.execute_update(
        contract.STEP,
        StepInput(turn=n, message=message),
        id=f"{handle.id}:step:{n}",
        result_type=StepReply,
    )


async def close(handle: WorkflowHandle[Any, Any]) -> EpisodeResult:
    return await handle.execute_update(contract.CLOSE, result_type=EpisodeResult)


async def test_no_step_for_the_idle_timeout_ends_the_session(env) -> None:
    s = StandIns(env.client)
    async with s.running():
        handle = await start(env, s, idle_timeout_s=3600)
        opened = await open_(handle)
        assert (opened.first_observation, opened.done) == ("m0", False)
        assert (await step(handle, 0, "hi")).reply == "r0"
        began = time.monotonic()
        result = await handle.result()
    assert time.monotonic() - began < 300  # an hour of idleness, skipped (a hang guard)
    assert result.duration_s >= 3600
    assert (result.termination, result.turns) == ("idle_timeout", 1)
    assert result.error == "no step arrived for 3600 s"
    # The session was alive: scored on its worker, then released.
    assert (result.reward, s.calls["score"], s.calls["release"]) == (0.5, 1, 1)


async def test_steps_then_close(env) -> None:
    s = StandIns(env.client)
    async with s.running():
        handle = await start(env, s)
        await open_(handle)
        replies = [await step(handle, n, f"say {n}") for n in range(2)]
        result = await close(handle)
        assert await handle.result() == result
    assert [(r.turn, r.reply, r.done) for r in replies] == [(0, "r0", False), (1, "r1", False)]
    assert [t.message for t in s.inputs["turn"]] == ["say 0", "say 1"]  # the trainer's
    assert (result.termination, result.turns, result.reward) == ("closed", 2, 0.5)
    assert s.calls["release"] == 1


async def test_a_step_out_of_order_is_rejected(env) -> None:
    s = StandIns(env.client)
    async with s.running():
        handle = await start(env, s)
        await open_(handle)
        with pytest.raises(WorkflowUpdateFailedError) as rejected:
            await step(handle, 1)
        assert isinstance(rejected.value.cause, ApplicationError)
        assert rejected.value.cause.type == contract.STEP_REJECTED
        assert (await step(handle, 0)).turn == 0
        await close(handle)
    assert s.calls["turn"] == 1


class Forgot(StandIns):
    async def on_turn(self, inp: TurnInput) -> TurnResult:
        raise ApplicationError("no such session", type=contract.SESSION_NOT_FOUND)


async def test_a_lost_session_ends_the_step_and_the_session_worker_lost(env) -> None:
    s = Forgot(env.client)
    async with s.running():
        handle = await start(env, s)
        await open_(handle)
        reply = await step(handle, 0)
        result = await handle.result()
    assert (reply.done, reply.termination) == (True, "worker_lost")
    assert result.termination == "worker_lost"
    assert (s.calls["score_transcript"], s.calls["score"], s.calls["release"]) == (1, 0, 0)


class WontStart(StandIns):
    async def on_provision(self, inp: ProvisionInput) -> SessionRef:
        raise ApplicationError("harness exited", type="harness_start_failed", non_retryable=True)


async def test_a_harness_start_failure_is_what_open_answers(env) -> None:
    s = WontStart(env.client)
    async with s.running():
        handle = await start(env, s)
        opened = await open_(handle)
        result = await handle.result()
    assert (opened.done, opened.termination, opened.error) == (
        True,
        "harness_start_failed",
        "harness exited",
    )
    # No reset, no score (issue 19).
    assert (result.termination, result.reward) == ("harness_start_failed", None)
    assert s.calls == {"provision": 1}


# -- cancellation -------------------------------------------------------------------------


class Hangs(HangsIn):
    async def on_turn(self, inp: TurnInput) -> TurnResult:
        await self.hang()  # the release stops the harness under it
        return turn_result(inp.turn)

    async def on_score(self, inp: ScoreInput) -> ScoreResult:
        await self.hang()
        return ScoreResult()


async def cancel_in(env, phase: str, hung: str) -> tuple[Hangs, EpisodeResult, Any]:
    """Cancel the session while `hung` hangs; the result and what the Update in flight
    (a step, a close) answered."""
    s = Hangs(env.client, phase)
    async with s.running():
        handle = await start(env, s)
        pending: asyncio.Task[Any] | None = None
        if phase == "stepping":
            await open_(handle)
            pending = asyncio.create_task(step(handle, 0))
        elif phase == "scoring":
            await open_(handle)
            pending = asyncio.create_task(close(handle))
        await s.started(hung)
        await handle.cancel()
        result = await handle.result()
        answer = await pending if pending else None
    assert (result.termination, result.error) == ("cancelled", "the session was cancelled")
    return s, result, answer


async def test_cancel_while_provisioning_ends_cancelled(own_env) -> None:
    s, _, _ = await cancel_in(own_env, "provisioning", "provision")
    assert (s.calls["turn"], s.calls["release"]) == (0, 0)  # no session yet


async def test_cancel_during_a_step_ends_the_step_and_releases(env) -> None:
    s, _, answer = await cancel_in(env, "stepping", "turn")
    assert s.calls["release"] == 1
    # The step in flight answers that the session ended (its turn was stopped under it).
    assert isinstance(answer, StepReply)
    assert (answer.done, answer.termination) == (True, "cancelled")


async def test_cancel_while_scoring_answers_close_with_the_result(env) -> None:
    s, result, answer = await cancel_in(env, "scoring", "score")
    assert s.calls["release"] == 1
    assert answer == result


# -- continue-as-new ----------------------------------------------------------------------


async def test_max_turns_counts_the_whole_chain_after_continue_as_new(env) -> None:
    """max_turns bounds the session, not one run: with 2 turns per run, step 2 runs in the
    second run and must still end the session at 3 turns."""
    s = StandIns(env.client)
    async with s.running():
        handle = await start(env, s, spec=spec(max_turns=3), turns_per_run=2)
        await open_(handle)
        replies = [await step(handle, n, f"say {n}") for n in range(3)]
        result = await handle.result()
    assert [r.done for r in replies] == [False, False, True]
    assert replies[-1].termination == "max_turns"
    assert (result.termination, result.turns) == ("max_turns", 3)
    assert s.calls["turn"] == 3
    assert (s.calls["score"], s.calls["release"]) == (1, 1)
