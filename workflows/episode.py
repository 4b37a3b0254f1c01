"""EpisodeWorkflow: provision -> drive (turn x N, score) -> release.

Deterministic: no I/O, clocks or randomness outside Temporal's APIs; only models
are imported. The live harness sits in one worker's memory, so every activity after
`provision` goes to that worker's own task queue (`SessionRef.task_queue`).

The turn loop runs on that worker as one long `drive` activity: it sends turn after
turn to the live session and records the finished ones here with `record_turns`
Updates (batches, at most `DriveInput.max_lag_s` / `pipeline` turns behind the harness), so a turn
costs what the harness costs, not two Temporal round trips. The drive's heartbeat
timeout is the worker-loss bound. A long episode continues-as-new between drives
(the server suggests it, or `turns_per_run`), keeping its live session and counters.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    TimeoutError,
    is_cancelled_exception,
)

with workflow.unsafe.imports_passed_through():
    from episodes import search_attributes as sa
    from episodes.messages import (
        DriveInput,
        DriveResult,
        EpisodeCarry,
        EpisodeInput,
        EpisodeProgress,
        ProvisionInput,
        ReleaseInput,
        ScoreInput,
        ScoreTranscriptInput,
        SessionRef,
    )
    from episodes.models import (
        EpisodeResult,
        ScoreResult,
        Termination,
        Transcript,
        TurnRecord,
        TurnResult,
    )
    from workflows.details import episode_details

# Outcomes a failing harness produces at provision time: an answer, not a retry.
HARNESS_FAILURES = {"harness_start_failed", "harness_crashed", "protocol_error", "turn_timeout"}
NON_RETRYABLE = [*HARNESS_FAILURES, "SpecError", "EnvironmentLoadError"]
SESSION_LOST = "SessionNotFound"
# `record_turns` rejections (rejected Updates leave no trace in history).
TURNS_ALREADY_RECORDED = "TurnsAlreadyRecorded"
TURNS_REJECTED = "TurnsRejected"


@workflow.defn(name="EpisodeWorkflow")
class EpisodeWorkflow:
    def __init__(self) -> None:
        self._status = "provisioning"
        self._ref: SessionRef | None = None
        self._turns: list[TurnRecord] = []  # this run's; `_first_turn` came before
        self._first_turn = 0
        self._runs = 1
        self._termination: Termination | None = None
        self._max_turns = 0
        self._turns_per_run = 0
        self._driving = False

    @property
    def _turns_done(self) -> int:
        return self._first_turn + len(self._turns)

    @workflow.query(name="progress")
    def progress(self) -> EpisodeProgress:
        return EpisodeProgress(
            status=self._status,  # type: ignore[arg-type]
            turns_done=self._turns_done,
            max_turns=self._max_turns,
            termination=self._termination,
            session=self._ref,
            first_message=self._ref.first_message if self._ref else None,
            turns=self._turns,
            first_turn=self._first_turn,
            runs=self._runs,
        )

    @workflow.run
    async def run(self, inp: EpisodeInput) -> EpisodeResult:
        spec, carry = inp.spec, inp.carry
        self._max_turns = spec.max_turns
        self._turns_per_run = inp.turns_per_run
        started = carry.started_at if carry else workflow.now()
        if carry is not None:
            self._ref, self._first_turn, self._runs = carry.session, carry.turns_done, carry.runs
        error: str | None = None
        score: ScoreResult | None = None
        paused = False
        try:
            if carry is None:
                try:
                    self._ref = await self._provision(inp)
                except ActivityError as e:
                    kind = _failure_type(e)
                    if kind not in HARNESS_FAILURES:
                        raise
                    self._termination, error = kind, _failure_message(e)  # type: ignore[assignment]
            if self._ref is not None:
                self._status = "running"
                self._set_details()
                drive = await self._drive(inp)
                paused = drive.termination is None
                self._termination, error, score = drive.termination, drive.error, drive.score
            if not paused:
                self._status = "scoring"
                if score is None:
                    score = await self._score(inp, error)
        except (asyncio.CancelledError, ActivityError) as e:
            # Cancelling the workflow cancels the activity it awaits; either error can surface.
            if not is_cancelled_exception(e):
                raise
            paused = False
            self._termination = "cancelled"
            error = "the episode was cancelled"
        finally:
            if self._ref is not None and self._termination != "worker_lost" and not paused:
                self._status = "releasing"
                await self._release(self._ref)
        if paused:
            assert self._ref is not None
            # The session stays live on its worker; the next run drives on from here.
            workflow.continue_as_new(
                inp.model_copy(
                    update={
                        "carry": EpisodeCarry(
                            session=self._ref,
                            turns_done=self._turns_done,
                            started_at=started,
                            runs=self._runs + 1,
                        )
                    }
                )
            )
        self._status = "done"
        termination = self._termination or "cancelled"
        workflow.upsert_search_attributes(
            [
                sa.TERMINATION.value_set(termination),
                sa.TURNS.value_set(self._turns_done),
                *(
                    [sa.REWARD.value_set(score.reward)]
                    if score and score.reward is not None
                    else []
                ),
            ]
        )
        self._set_details()
        score = score or ScoreResult()
        return EpisodeResult(
            workflow_id=workflow.info().workflow_id,
            task_id=inp.task.id,
            sample=inp.sample,
            env=spec.env,
            spec_name=spec.name,
            termination=termination,
            error=error,
            turns=self._turns_done,
            reward=score.reward,
            score_details=score.details,
            duration_s=(workflow.now() - started).total_seconds(),
            pool_hit=self._ref.pool_hit if self._ref else None,
        )

    # -- the turns, recorded by the drive ------------------------------------------

    @workflow.update(name="record_turns")
    def record_turns(self, results: list[TurnResult]) -> bool:
        """Record finished turns (repeats are ignored); False asks the drive to pause."""
        for result in results:
            if result.record.turn == self._turns_done:
                self._turns.append(result.record)
        self._set_details()
        return not (
            len(self._turns) >= self._turns_per_run
            or workflow.info().is_continue_as_new_suggested()
        )

    @record_turns.validator
    def _check_turns(self, results: list[TurnResult]) -> None:
        if not self._driving:
            raise ApplicationError("no drive is running", type=TURNS_REJECTED, non_retryable=True)
        if not results:
            raise ApplicationError("no turns to record", type=TURNS_REJECTED, non_retryable=True)
        first, last = results[0].record.turn, results[-1].record.turn
        if first > self._turns_done:
            raise ApplicationError(
                f"turn {first} recorded before turn {self._turns_done}",
                type=TURNS_REJECTED,
                non_retryable=True,
            )
        if last < self._turns_done:
            # A retried drive replaying its session's record: nothing new to write.
            raise ApplicationError(
                f"turns {first}-{last} are recorded", type=TURNS_ALREADY_RECORDED
            )

    # -- the story, step by step -------------------------------------------------

    async def _provision(self, inp: EpisodeInput) -> SessionRef:
        info = workflow.info()
        h = inp.spec.harness
        return await workflow.execute_activity(
            "provision",
            ProvisionInput(
                spec=inp.spec,
                task=inp.task,
                sample=inp.sample,
                workflow_id=info.workflow_id,
                run_id=info.run_id,
            ),
            result_type=SessionRef,
            # Box start (a container, a VM) plus the harness's own ready timeout.
            start_to_close_timeout=timedelta(seconds=h.ready_timeout_s + 300),
            retry_policy=RetryPolicy(
                maximum_attempts=3,
                initial_interval=timedelta(seconds=1),
                non_retryable_error_types=NON_RETRYABLE,
            ),
            summary=f"provision {inp.task.id}",
        )

    async def _drive(self, inp: EpisodeInput) -> DriveResult:
        """Run the turns (and the score) on the session's worker, from the next turn on."""
        assert self._ref is not None
        ref, spec, info = self._ref, inp.spec, workflow.info()
        first = self._turns_done
        lost = timedelta(seconds=spec.worker_lost_timeout_s)
        per_turn = spec.turn_timeout_s + 2 * spec.harness.stop_timeout_s + 30
        self._driving = True
        try:
            result = await workflow.execute_activity(
                "drive",
                DriveInput(
                    session_id=ref.session_id,
                    workflow_id=info.workflow_id,
                    run_id=info.run_id,
                    first_turn=first,
                    max_turns=spec.max_turns,
                ),
                result_type=DriveResult,
                task_queue=ref.task_queue,
                # A dead worker never picks the task up, or stops heartbeating: noticed
                # after `lost`, not never.
                schedule_to_start_timeout=lost,
                heartbeat_timeout=lost,
                # The harness enforces turn_timeout_s on each turn; this is the backstop.
                start_to_close_timeout=timedelta(
                    seconds=(spec.max_turns - first) * per_turn + spec.score_timeout_s
                ),
                retry_policy=RetryPolicy(
                    maximum_attempts=5,
                    initial_interval=timedelta(milliseconds=200),
                    non_retryable_error_types=[SESSION_LOST, "TurnOutOfOrder"],
                ),
                summary=f"drive from turn {first} (max {spec.max_turns})",
            )
        except ActivityError as e:
            if not _is_worker_lost(e):
                raise
            result = DriveResult(
                termination="worker_lost", error=_lost_message(e, ref), next_turn=first
            )
        finally:
            self._driving = False
        # An Update still being handled finishes before the workflow moves on.
        await workflow.wait_condition(workflow.all_handlers_finished)
        return result

    async def _score(self, inp: EpisodeInput, error: str | None) -> ScoreResult:
        """Score on the session's worker; without one, score the recorded transcript here."""
        spec = inp.spec
        if self._ref is not None and self._termination != "worker_lost":
            try:
                return await workflow.execute_activity(
                    "score",
                    ScoreInput(session_id=self._ref.session_id, termination=self._termination),
                    result_type=ScoreResult,
                    task_queue=self._ref.task_queue,
                    schedule_to_start_timeout=timedelta(seconds=spec.worker_lost_timeout_s),
                    start_to_close_timeout=timedelta(seconds=spec.score_timeout_s),
                    retry_policy=RetryPolicy(
                        maximum_attempts=3, non_retryable_error_types=[SESSION_LOST]
                    ),
                    summary="score",
                )
            except ActivityError as e:
                if not _is_worker_lost(e):
                    raise
                self._termination, error = "worker_lost", _lost_message(e, self._ref)
        transcript = Transcript(
            task=inp.task,
            first_message=self._ref.first_message if self._ref else None,
            turns=self._turns,
            termination=self._termination,
            error=error,
        )
        # A continued run holds only its own turns: the rubric sees those.
        return await workflow.execute_local_activity(
            "score_transcript",
            ScoreTranscriptInput(env=spec.env, env_args=spec.env_args, transcript=transcript),
            result_type=ScoreResult,
            start_to_close_timeout=timedelta(seconds=spec.score_timeout_s),
            retry_policy=RetryPolicy(maximum_attempts=3, non_retryable_error_types=NON_RETRYABLE),
            summary="score transcript",
        )

    async def _release(self, ref: SessionRef) -> None:
        """Always runs (also after cancellation); a failed release is logged, not fatal."""
        try:
            await workflow.execute_activity(
                "release",
                ReleaseInput(session_id=ref.session_id),
                task_queue=ref.task_queue,
                schedule_to_start_timeout=timedelta(seconds=30),
                start_to_close_timeout=timedelta(seconds=120),
                retry_policy=RetryPolicy(maximum_attempts=3),
                summary="release",
            )
        except ActivityError as e:
            # The worker's reaper stops sessions whose workflow has closed.
            workflow.logger.warning("release of %s failed: %s", ref.session_id, e)

    def _set_details(self) -> None:
        workflow.set_current_details(
            episode_details(
                self._status, self._max_turns, self._turns, self._termination, self._turns_done
            )
        )


def _failure_type(e: ActivityError) -> str | None:
    cause = e.cause
    return cause.type if isinstance(cause, ApplicationError) else None


def _failure_message(e: ActivityError) -> str:
    cause = e.cause
    return cause.message if cause is not None else str(e)


def _is_worker_lost(e: ActivityError) -> bool:
    cause = e.cause
    if isinstance(cause, TimeoutError):
        return True  # schedule-to-start or heartbeat: nobody is holding the session
    return isinstance(cause, ApplicationError) and cause.type == SESSION_LOST


def _lost_message(e: ActivityError, ref: SessionRef) -> str:
    return (
        f"worker {ref.worker_id} (queue {ref.task_queue}) lost the session "
        f"{ref.session_id}: {_failure_message(e)}"
    )
