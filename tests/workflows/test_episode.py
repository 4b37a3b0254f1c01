"""EpisodeWorkflow's logic against stand-in activities on the time-skipping test server.

The test server skips time only while no activity is pending (a pending one locks the
clock), so retry backoffs and workflow timers pass in skipped time but an activity's
own timeouts (heartbeat, schedule-to-start, start-to-close) in real time: the lost-worker
tests shorten them to fractions of a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import uuid
from typing import Any

import pytest
from temporalio import activity
from temporalio.api.enums.v1 import EventType, TimeoutType
from temporalio.client import WorkflowFailureError, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from episodes import contract
from episodes.types.io import (
    DriveInput,
    DriveResult,
    EpisodeCarry,
    EpisodeInput,
    EpisodeProgress,
    ProvisionInput,
    SessionRef,
)
from episodes.types.results import EpisodeResult, ScoreResult, TurnResult
from tests.workflows.standins import HangsIn, StandIns, spec, task, turn_result


async def start(
    env: WorkflowEnvironment, s: StandIns, **inp: Any
) -> WorkflowHandle[Any, EpisodeResult]:
    return await env.client.start_workflow(
        contract.EPISODE_WORKFLOW,
        EpisodeInput.model_validate({"spec": spec(), "task": task(), **inp}),
        id=f"ep-{uuid.uuid4().hex[:8]}",
        task_queue=s.shared_queue,
        result_type=EpisodeResult,
    )


async def test_standins_match_the_contract() -> None:
    for declared in contract.DECLARED:
        name = activity._Definition.must_from_callable(declared).name
        stand_in = getattr(StandIns, declared.__name__)
        assert activity._Definition.must_from_callable(stand_in).name == name
        params = list(inspect.signature(stand_in).parameters.values())[1:]  # drop self
        assert params == list(inspect.signature(declared).parameters.values())
        assert inspect.signature(stand_in).return_annotation == (
            inspect.signature(declared).return_annotation
        )


async def timeouts(handle: WorkflowHandle[Any, Any]) -> list[TimeoutType.ValueType]:
    """The timeout types of the activities that timed out (after their retries)."""
    history = await handle.fetch_history()
    return [
        e.activity_task_timed_out_event_attributes.failure.timeout_failure_info.timeout_type
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT
    ]


# -- continue-as-new ----------------------------------------------------------------------


class Pausing(StandIns):
    """A drive that records turn by turn and pauses when the workflow asks it to."""

    async def on_drive(self, inp: DriveInput) -> DriveResult:
        for n in range(inp.first_turn, inp.max_turns):
            if not await self.record(inp, [turn_result(n)]) and n + 1 < inp.max_turns:
                return DriveResult(next_turn=n + 1)  # paused: the next run drives on
        return DriveResult(
            termination="max_turns", next_turn=inp.max_turns, score=ScoreResult(reward=1.0)
        )


async def test_continue_as_new_hands_the_live_session_to_the_next_run(env) -> None:
    s = Pausing(env.client)
    async with s.running():
        handle = await start(env, s, spec=spec(max_turns=5), turns_per_run=2)
        result = await handle.result()
        progress = await handle.query(contract.PROGRESS, result_type=EpisodeProgress)
    assert (result.termination, result.turns, result.reward) == ("max_turns", 5, 1.0)
    # One provision and one release for the whole chain; a drive per run, each from
    # where the last paused, on the same session.
    assert (s.calls["provision"], s.calls["drive"], s.calls["release"]) == (1, 3, 1)
    drives = s.inputs["drive"]
    assert [d.first_turn for d in drives] == [0, 2, 4]
    assert len({d.session_id for d in drives}) == 1
    assert len({d.run_id for d in drives}) == 3
    assert (progress.runs, progress.first_turn, progress.turns_done) == (3, 4, 5)
    assert [t.turn for t in progress.turns] == [4]


# -- a lost worker ------------------------------------------------------------------------


def assert_lost(s: StandIns, result: EpisodeResult) -> None:
    """worker_lost: scored on the recorded transcript here, nothing sent to the gone worker."""
    assert result.termination == "worker_lost"
    assert result.error and "lost the session" in result.error
    assert result.reward == 0.25  # score_transcript's
    assert (s.calls["score_transcript"], s.calls["score"], s.calls["release"]) == (1, 0, 0)


class GoesSilent(StandIns):
    async def on_drive(self, inp: DriveInput) -> DriveResult:
        activity.heartbeat()
        await self.hang()  # no more heartbeats: the worker looks dead
        raise AssertionError("unreachable")


async def test_a_drive_that_stops_heartbeating_is_worker_lost(env) -> None:
    s = GoesSilent(env.client)
    async with s.running():
        handle = await start(env, s, spec=spec(worker_lost_timeout_s=0.3))
        result = await handle.result()
    assert_lost(s, result)
    assert await timeouts(handle) == [TimeoutType.TIMEOUT_TYPE_HEARTBEAT]
    assert s.calls["drive"] == 5  # each attempt timed out the same way


async def test_a_session_queue_nobody_polls_is_worker_lost(env) -> None:
    s = StandIns(env.client)
    async with s.running(session_worker=False):
        handle = await start(env, s, spec=spec(worker_lost_timeout_s=0.3))
        result = await handle.result()
    assert_lost(s, result)
    assert s.calls["drive"] == 0
    assert await timeouts(handle) == [TimeoutType.TIMEOUT_TYPE_SCHEDULE_TO_START]


class Forgot(StandIns):
    async def on_drive(self, inp: DriveInput) -> DriveResult:
        raise ApplicationError("no such session", type=contract.SESSION_NOT_FOUND)


async def test_session_not_found_is_worker_lost(env) -> None:
    s = Forgot(env.client)
    async with s.running():
        result = await (await start(env, s)).result()
    assert_lost(s, result)
    assert s.calls["drive"] == 1  # not retried


class Overruns(StandIns):
    async def on_drive(self, inp: DriveInput) -> DriveResult:
        await self.hang()  # past its start-to-close backstop, on a worker that is alive
        raise AssertionError("unreachable")


async def test_a_drive_past_its_start_to_close_is_not_worker_lost(env) -> None:
    s = Overruns(env.client)
    # The drive's start-to-close is (turns left) x per-turn bound + score_timeout_s: a
    # continued run with no turn left makes it score_timeout_s, and a heartbeat timeout
    # (worker_lost_timeout_s) beyond that means only the start-to-close can fire.
    short = spec(max_turns=2, score_timeout_s=0.2, worker_lost_timeout_s=60)
    ref = await s.on_provision(
        ProvisionInput(spec=short, task=task(), sample=0, workflow_id="w", run_id="r")
    )
    carry = EpisodeCarry(session=ref, turns_done=2, started_at=await env.get_current_time())
    async with s.running():
        handle = await start(env, s, spec=short, carry=carry)
        with contextlib.suppress(WorkflowFailureError):  # failing the workflow is right too
            result = await handle.result()
            assert result.termination != "worker_lost"
    assert await timeouts(handle) == [TimeoutType.TIMEOUT_TYPE_START_TO_CLOSE]
    # The worker is alive and holds the session: it must be released.
    assert s.calls["release"] == 1


# -- cancellation -------------------------------------------------------------------------


class Hangs(HangsIn):
    async def on_drive(self, inp: DriveInput) -> DriveResult:
        if self.phase == "driving":
            await self.hang()
        if self.phase == "scoring":  # a drive that ended without scoring: the workflow scores
            return DriveResult(termination="env_done", next_turn=0)
        return await super().on_drive(inp)

    async def on_score(self, inp: Any) -> ScoreResult:
        await self.hang()
        raise AssertionError("unreachable")


async def cancel_in(env: WorkflowEnvironment, phase: str, hung: str) -> tuple[Hangs, EpisodeResult]:
    s = Hangs(env.client, phase)
    async with s.running():
        handle = await start(env, s)
        await s.started(hung)
        await handle.cancel()
        result = await handle.result()
    assert result.termination == "cancelled"
    assert result.error == "the episode was cancelled"
    assert s.calls["score_transcript"] == 0
    return s, result


async def test_cancel_while_provisioning_ends_cancelled(own_env) -> None:
    s, _ = await cancel_in(own_env, "provisioning", "provision")
    # No session yet to release: one that starts late is stopped by its worker's reaper
    # once the workflow has closed.
    assert (s.calls["drive"], s.calls["release"]) == (0, 0)


@pytest.mark.parametrize(("phase", "hung"), [("driving", "drive"), ("scoring", "score")])
async def test_cancel_while_driving_or_scoring_ends_cancelled_and_released(
    env, phase, hung
) -> None:
    s, _ = await cancel_in(env, phase, hung)
    assert s.calls["release"] == 1


# -- a harness that fails to start --------------------------------------------------------


class WontStart(StandIns):
    async def on_provision(self, inp: ProvisionInput) -> SessionRef:
        raise ApplicationError(
            "harness exited before ready", type="harness_start_failed", non_retryable=True
        )


async def test_a_harness_start_failure_is_the_outcome_not_scored_nor_released(env) -> None:
    s = WontStart(env.client)
    async with s.running():
        result = await (await start(env, s)).result()
    assert result.termination == "harness_start_failed"
    assert result.error == "harness exited before ready"
    # No reset, no score (issue 19): before, a fresh env's score() graded nothing.
    assert (result.turns, result.reward) == (0, None)
    assert s.calls == {"provision": 1}


# -- an env whose score fails -----------------------------------------------------------


def _score_raised() -> ApplicationError:
    return ApplicationError(
        "score() raised ValueError: score-canary", type=contract.ENV_ERROR, non_retryable=True
    )


class LostThenScoreRaises(GoesSilent):
    async def on_score_transcript(self, inp: Any) -> ScoreResult:
        raise _score_raised()


async def test_score_raising_on_the_fallback_path_is_env_error_not_a_failure(env) -> None:
    s = LostThenScoreRaises(env.client)
    async with s.running():
        result = await (await start(env, s, spec=spec(worker_lost_timeout_s=0.3))).result()
    # Before: the workflow failed.
    assert (result.termination, result.reward) == ("env_error", None)
    assert "score-canary" in result.score_details["error"]
    assert s.calls["score_transcript"] == 1  # not retried


class ScoreRaises(StandIns):
    async def on_score(self, inp: Any) -> ScoreResult:
        raise _score_raised()


async def test_score_activity_raising_is_env_error_not_a_failure(env) -> None:
    s = ScoreRaises(env.client)
    async with s.running():
        result = await (await start(env, s, spec=spec(turn_mode="activity"))).result()
    assert (result.termination, result.turns, result.reward) == ("env_error", 3, None)
    assert "score-canary" in result.score_details["error"]
    assert (s.calls["score"], s.calls["score_transcript"], s.calls["release"]) == (1, 0, 1)


# -- record_turns' validator --------------------------------------------------------------


class Gated(StandIns):
    """Provision and drive wait for the test: it sends record_turns Updates meanwhile."""

    def __init__(self, client: Any) -> None:
        super().__init__(client)
        self.gates = {"provision": asyncio.Event(), "drive": asyncio.Event()}

    async def on_provision(self, inp: ProvisionInput) -> SessionRef:
        await self.gates["provision"].wait()
        return await super().on_provision(inp)

    async def on_drive(self, inp: DriveInput) -> DriveResult:
        await self.gates["drive"].wait()
        return DriveResult(termination="max_turns", next_turn=3, score=ScoreResult(reward=1.0))


async def record(handle: WorkflowHandle[Any, Any], turns: list[int]) -> bool:
    results: list[TurnResult] = [turn_result(n) for n in turns]
    return await handle.execute_update(
        contract.RECORD_TURNS, results, id=uuid.uuid4().hex, result_type=bool
    )


async def rejected(handle: WorkflowHandle[Any, Any], turns: list[int]) -> str:
    with pytest.raises(WorkflowUpdateFailedError) as failed:
        await record(handle, turns)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError)
    return f"{cause.type}: {cause.message}"


async def test_record_turns_rejects_batches_out_of_order_repeated_or_without_a_drive(env) -> None:
    s = Gated(env.client)
    async with s.running():
        handle = await start(env, s)
        await s.started("provision")
        assert await rejected(handle, [0]) == "TurnsRejected: no drive is running"
        s.gates["provision"].set()
        await s.started("drive")
        assert await record(handle, [0, 1]) is True
        assert await rejected(handle, [3]) == "TurnsRejected: turn 3 recorded before turn 2"
        assert await rejected(handle, [0, 1]) == "TurnsAlreadyRecorded: turns 0-1 are recorded"
        assert await rejected(handle, []) == "TurnsRejected: no turns to record"
        assert await record(handle, [1, 2]) is True  # overlapping: only turn 2 is new
        progress = await handle.query(contract.PROGRESS, result_type=EpisodeProgress)
        assert [t.turn for t in progress.turns] == [0, 1, 2]
        s.gates["drive"].set()
        result = await handle.result()
        history = await handle.fetch_history()
    assert (result.termination, result.turns) == ("max_turns", 3)
    # Rejected Updates leave no trace in the history.
    accepted = [
        e
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
    ]
    assert len(accepted) == 2


# -- a restore that cannot succeed ------------------------------------------------------


class RestoreFails(GoesSilent):
    async def on_provision(self, inp: ProvisionInput) -> SessionRef:
        if self.calls["restore"]:
            raise ApplicationError("no box for the restore")  # retryable, every attempt
        return await super().on_provision(inp)


async def test_a_restore_that_cannot_succeed_ends_worker_lost_not_a_failure(env) -> None:
    s = RestoreFails(env.client)
    lost = spec(worker_lost_timeout_s=0.3, on_worker_lost="restart")
    async with s.running():
        result = await (await start(env, s, spec=lost)).result()
    # Before: the workflow failed once the restore's retries ran out.
    assert result.termination == "worker_lost"
    assert result.error and "restart 1 failed" in result.error
    assert (s.calls["restore"], s.calls["score_transcript"], s.calls["release"]) == (3, 1, 0)
