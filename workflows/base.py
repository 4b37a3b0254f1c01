"""What both episode workflows share: the story's steps, without any handler but `progress`.

provision (or the harness's failure as the outcome) -> ... -> score -> release ->
finish (the outcome's search attributes, the details, the EpisodeResult).
`EpisodeWorkflow` drives the turns in between; `InteractiveEpisodeWorkflow` takes
them as `step` Updates. Each defines its own Updates: an interactive session must
not accept the drive's `record_turns`, nor an episode a trainer's `step`.

Workflow code: deterministic, models only.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

from workflows.details import episode_details
from workflows.failures import failure_message, is_worker_lost, lost_message, provision_failure

with workflow.unsafe.imports_passed_through():
    from episodes import contract
    from episodes import search_attributes as sa
    from episodes.messages import (
        EpisodeInput,
        EpisodeProgress,
        EpisodeStatus,
        ProvisionInput,
        ReleaseInput,
        ScoreInput,
        ScoreTranscriptInput,
        SessionRef,
    )
    from episodes.models import EpisodeResult, ScoreResult, Termination, Transcript, TurnRecord


class EpisodeBase:
    """The state of one episode and the steps of its story (not a workflow by itself)."""

    def __init__(self) -> None:
        self._status: EpisodeStatus = "provisioning"
        self._ref: SessionRef | None = None
        self._turns: list[TurnRecord] = []  # this run's; `_first_turn` came before
        self._first_turn = 0
        self._runs = 1
        self._termination: Termination | None = None
        self._max_turns = 0

    @property
    def _turns_done(self) -> int:
        return self._first_turn + len(self._turns)

    # The SDK collects handlers over the class hierarchy, so each subclass answers it.
    @workflow.query(name=contract.PROGRESS)
    def progress(self) -> EpisodeProgress:
        return EpisodeProgress(
            status=self._status,
            turns_done=self._turns_done,
            max_turns=self._max_turns,
            termination=self._termination,
            session=self._ref,
            first_message=self._ref.first_message if self._ref else None,
            turns=self._turns,
            first_turn=self._first_turn,
            runs=self._runs,
        )

    # -- the story, step by step -------------------------------------------------------

    async def _provision_or_outcome(self, inp: EpisodeInput) -> str | None:
        """Provision the session (`_ref`); a harness that fails to start is the episode's
        outcome (`_termination`, and the error returned), not a workflow failure."""
        try:
            self._ref = await self._provision(inp)
        except ActivityError as e:
            kind = provision_failure(e)
            if kind is None:
                raise
            self._termination = kind
            return failure_message(e)
        return None

    async def _provision(self, inp: EpisodeInput) -> SessionRef:
        info = workflow.info()
        h = inp.spec.harness
        return await workflow.execute_activity(
            contract.provision,
            ProvisionInput(
                spec=inp.spec,
                task=inp.task,
                sample=inp.sample,
                workflow_id=info.workflow_id,
                run_id=info.run_id,
            ),
            # Box start (a container, a VM) plus the harness's own ready timeout.
            start_to_close_timeout=timedelta(seconds=h.ready_timeout_s + 300),
            retry_policy=RetryPolicy(
                maximum_attempts=3,
                initial_interval=timedelta(seconds=1),
                non_retryable_error_types=list(contract.NON_RETRYABLE_PROVISION),
            ),
            summary=f"provision {inp.task.id}",
        )

    async def _score(self, inp: EpisodeInput, error: str | None) -> ScoreResult:
        """Score on the session's worker; without one, score the recorded transcript here."""
        spec = inp.spec
        if self._ref is not None and self._termination != "worker_lost":
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
                if not is_worker_lost(e):
                    raise
                self._termination, error = "worker_lost", lost_message(e, self._ref)
        transcript = Transcript(
            task=inp.task,
            first_message=self._ref.first_message if self._ref else None,
            turns=self._turns,
            termination=self._termination,
            error=error,
        )
        # A continued run holds only its own turns: the rubric sees those.
        return await workflow.execute_local_activity(
            contract.score_transcript,
            ScoreTranscriptInput(env=spec.env, env_args=spec.env_args, transcript=transcript),
            start_to_close_timeout=timedelta(seconds=spec.score_timeout_s),
            retry_policy=RetryPolicy(
                maximum_attempts=3,
                non_retryable_error_types=list(contract.NON_RETRYABLE_PROVISION),
            ),
            summary="score transcript",
        )

    async def _release(self, ref: SessionRef) -> None:
        """Always runs (also after cancellation); a failed release is logged, not fatal."""
        try:
            await workflow.execute_activity(
                contract.release,
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

    def _finish(
        self, inp: EpisodeInput, started: datetime, error: str | None, score: ScoreResult
    ) -> EpisodeResult:
        """The episode is over: its outcome in the search attributes and details, and the
        result (no termination yet means it was cancelled before it had one)."""
        self._status = "done"
        termination = self._termination or "cancelled"
        workflow.upsert_search_attributes(
            [
                sa.TERMINATION.value_set(termination),
                sa.TURNS.value_set(self._turns_done),
                *([sa.REWARD.value_set(score.reward)] if score.reward is not None else []),
            ]
        )
        self._set_details()
        return EpisodeResult(
            workflow_id=workflow.info().workflow_id,
            task_id=inp.task.id,
            sample=inp.sample,
            env=inp.spec.env,
            spec_name=inp.spec.name,
            termination=termination,
            error=error,
            turns=self._turns_done,
            reward=score.reward,
            score_details=score.details,
            duration_s=(workflow.now() - started).total_seconds(),
            pool_hit=self._ref.pool_hit if self._ref else None,
        )

    def _set_details(self) -> None:
        workflow.set_current_details(
            episode_details(
                self._status, self._max_turns, self._turns, self._termination, self._turns_done
            )
        )
