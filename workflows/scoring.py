"""The score step of an episode's story (`workflows.base.EpisodeBase` inherits it).

On the session's worker (`score`) while the session lives; otherwise the recorded
transcript is scored here (`score_transcript`, a local activity). An env never reset
is not scored; an env whose score raises or hangs ends the episode `env_error`.

Workflow code: deterministic, models only.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

from workflows.failures import (
    failure_message,
    failure_type,
    is_backstop_timeout,
    is_worker_lost,
    lost_message,
)

with workflow.unsafe.imports_passed_through():
    from episodes import contract
    from episodes.types.io import EpisodeInput, ScoreInput, ScoreTranscriptInput, SessionRef
    from episodes.types.results import ScoreResult, Termination, Transcript, TurnRecord

# Histories recorded before a continued run's transcript score included earlier runs.
CHAIN_SCORE_PATCH = "score-whole-chain"
# Histories recorded before an episode whose env was never reset (provision failed:
# the harness did not start, or reset raised) went unscored (they ran score_transcript).
NO_RESET_NO_SCORE_PATCH = "no-reset-no-score"
# Histories recorded before a score that raised (the `score` or `score_transcript`
# activity's env_error) was the episode's env_error (the workflow failed).
SCORE_ENV_ERROR_PATCH = "score-env-error-outcome"


class Scoring:
    """`_score` and its outcomes, over the episode's state (`EpisodeBase` holds it)."""

    _ref: SessionRef | None
    _opened: bool
    _termination: Termination | None
    _score_recorded: bool
    _turns: list[TurnRecord]
    _first_turn: int

    async def _score(self, inp: EpisodeInput, error: str | None) -> ScoreResult:
        """Score on the session's worker; without one, score the recorded transcript here.
        An env never reset is not scored (no reward); an env whose score raises ends the
        episode `env_error` (the reason in the score's details)."""
        spec = inp.spec
        if not self._opened and self._ref is None and workflow.patched(NO_RESET_NO_SCORE_PATCH):
            # Provision failed: the env never saw the episode, and a fresh env's score()
            # would grade nothing (a tool-counting env rewarded it 1.0).
            return ScoreResult()
        if (
            self._ref is not None
            and self._termination != "worker_lost"
            and not self._score_recorded
        ):
            try:
                return await workflow.execute_activity(
                    contract.score,
                    ScoreInput(session_id=self._ref.session_id, termination=self._termination),
                    task_queue=self._ref.task_queue,
                    schedule_to_start_timeout=timedelta(seconds=spec.worker_lost_timeout_s),
                    start_to_close_timeout=timedelta(seconds=spec.score_timeout_s),
                    retry_policy=RetryPolicy(
                        maximum_attempts=3, non_retryable_error_types=[contract.SESSION_NOT_FOUND]
                    ),
                    summary="score",
                )
            except ActivityError as e:
                if self._score_raised(e):
                    return self._score_failed(e)
                if not is_worker_lost(e):
                    if not is_backstop_timeout(e):
                        raise
                    # The env's score() hung on a live worker past score_timeout_s: the
                    # env failed; it is not scored again.
                    self._termination = "env_error"
                    return ScoreResult(
                        details={"error": f"score() did not finish in {spec.score_timeout_s:g} s"}
                    )
                self._termination, error = "worker_lost", lost_message(e, self._ref)
        transcript = Transcript(
            task=inp.task,
            first_message=self._ref.first_message if self._ref else None,
            turns=self._turns,
            termination=self._termination,
            error=error,
        )
        score_input = ScoreTranscriptInput(
            env=spec.env, env_args=spec.env_args, transcript=transcript
        )
        if self._first_turn and workflow.patched(CHAIN_SCORE_PATCH):
            # A continued run holds only its own turns: the activity reads the earlier
            # runs' from their histories, so the rubric sees the whole episode.
            score_input.workflow_id = workflow.info().workflow_id
            score_input.earlier_turns = self._first_turn
        try:
            return await workflow.execute_local_activity(
                contract.score_transcript,
                score_input,
                start_to_close_timeout=timedelta(seconds=spec.score_timeout_s),
                retry_policy=RetryPolicy(
                    maximum_attempts=3,
                    non_retryable_error_types=list(contract.NON_RETRYABLE_PROVISION),
                ),
                summary="score transcript",
            )
        # A local activity's failure may surface as its ApplicationError itself.
        except (ActivityError, ApplicationError) as e:
            if not self._score_raised(e):
                raise
            return self._score_failed(e)

    def _score_raised(self, e: ActivityError | ApplicationError) -> bool:
        """The env's score raised (the activity's env_error): the episode's outcome."""
        kind = e.type if isinstance(e, ApplicationError) else failure_type(e)
        return kind == contract.ENV_ERROR and workflow.patched(SCORE_ENV_ERROR_PATCH)

    def _score_failed(self, e: ActivityError | ApplicationError) -> ScoreResult:
        self._termination = "env_error"
        message = e.message if isinstance(e, ApplicationError) else failure_message(e)
        return ScoreResult(details={"error": message})
