"""Design (a), kept for the study: one `turn` activity per turn on the session queue.

This is `workflows/episode.py` as it was before the drive design shipped (the
other prototypes subclass it and replace `_turn_loop`). Original docstring:

EpisodeWorkflow: provision -> turn x N -> score -> release.

Deterministic: no I/O, clocks or randomness outside Temporal's APIs; only models
are imported. The live harness sits in one worker's memory, so every activity after
`provision` goes to that worker's own task queue (`SessionRef.task_queue`).
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
        EpisodeInput,
        EpisodeProgress,
        ProvisionInput,
        ReleaseInput,
        ScoreInput,
        ScoreTranscriptInput,
        SessionRef,
        TurnInput,
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


class WorkerLost(Exception):
    """The worker holding the session stopped answering."""


@workflow.defn(name="TurnPerActivityEpisode")
class TurnPerActivityEpisode:
    def __init__(self) -> None:
        self._status = "provisioning"
        self._ref: SessionRef | None = None
        self._turns: list[TurnRecord] = []
        self._termination: Termination | None = None
        self._max_turns = 0

    @workflow.query(name="progress")
    def progress(self) -> EpisodeProgress:
        return EpisodeProgress(
            status=self._status,  # type: ignore[arg-type]
            turns_done=len(self._turns),
            max_turns=self._max_turns,
            termination=self._termination,
            session=self._ref,
            first_message=self._ref.first_message if self._ref else None,
            turns=self._turns,
        )

    @workflow.run
    async def run(self, inp: EpisodeInput) -> EpisodeResult:
        spec = inp.spec
        self._max_turns = spec.max_turns
        started = workflow.now()
        error: str | None = None
        score = ScoreResult()
        try:
            try:
                self._ref = await self._provision(inp)
            except ActivityError as e:
                kind = _failure_type(e)
                if kind not in HARNESS_FAILURES:
                    raise
                self._termination, error = kind, _failure_message(e)  # type: ignore[assignment]
            if self._ref is not None:
                self._status = "running"
                self._termination, error = await self._turn_loop(inp)
            self._status = "scoring"
            score = await self._score(inp, error)
        except (asyncio.CancelledError, ActivityError) as e:
            # Cancelling the workflow cancels the activity it awaits; either error can surface.
            if not is_cancelled_exception(e):
                raise
            self._termination = "cancelled"
            error = "the episode was cancelled"
        finally:
            if self._ref is not None and self._termination != "worker_lost":
                self._status = "releasing"
                await self._release(self._ref)
        self._status = "done"
        termination = self._termination or "cancelled"
        workflow.upsert_search_attributes(
            [
                sa.TERMINATION.value_set(termination),
                sa.TURNS.value_set(len(self._turns)),
                *([sa.REWARD.value_set(score.reward)] if score.reward is not None else []),
            ]
        )
        self._set_details()
        return EpisodeResult(
            workflow_id=workflow.info().workflow_id,
            task_id=inp.task.id,
            sample=inp.sample,
            env=spec.env,
            spec_name=spec.name,
            termination=termination,
            error=error,
            turns=len(self._turns),
            reward=score.reward,
            score_details=score.details,
            duration_s=(workflow.now() - started).total_seconds(),
            pool_hit=self._ref.pool_hit if self._ref else None,
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

    async def _turn_loop(self, inp: EpisodeInput) -> tuple[Termination, str | None]:
        spec = inp.spec
        for n in range(spec.max_turns):
            try:
                result = await self._turn(inp, n)
            except WorkerLost as e:
                return "worker_lost", str(e)
            self._turns.append(result.record)
            self._set_details()
            if result.observation.done:
                return result.termination or "env_done", result.record.error
        return "max_turns", None

    async def _turn(
        self, inp: EpisodeInput, n: int, turn: TurnInput | None = None, summary: str = "turn"
    ) -> TurnResult:
        """One turn on the session's worker; `turn` overrides what is sent (interactive)."""
        assert self._ref is not None
        spec = inp.spec
        lost = timedelta(seconds=spec.worker_lost_timeout_s)
        try:
            return await workflow.execute_activity(
                "turn",
                turn or TurnInput(session_id=self._ref.session_id, turn=n),
                result_type=TurnResult,
                task_queue=self._ref.task_queue,
                # A dead worker never picks the task up: noticed after `lost`, not never.
                schedule_to_start_timeout=lost,
                heartbeat_timeout=lost,
                # The harness enforces turn_timeout_s itself; this is the backstop.
                start_to_close_timeout=timedelta(
                    seconds=spec.turn_timeout_s + 2 * spec.harness.stop_timeout_s + 30
                ),
                retry_policy=RetryPolicy(
                    maximum_attempts=5,
                    initial_interval=timedelta(milliseconds=200),
                    non_retryable_error_types=[SESSION_LOST, "TurnOutOfOrder"],
                ),
                summary=f"{summary} {n}",
            )
        except ActivityError as e:
            if _is_worker_lost(e):
                raise WorkerLost(_lost_message(e, self._ref)) from None
            raise

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
            episode_details(self._status, self._max_turns, self._turns, self._termination)
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


# The prototypes were written against this class under its old name.
EpisodeWorkflow = TurnPerActivityEpisode
