"""Designs (c), (c'): the session's worker drives the loop; Updates record the turns.

One long `drive` activity on the session queue runs turn after turn against the
live session and calls the workflow's `record_turns` Update with the finished turns
(id = the turns it carries). (c) awaits each turn's Update, so the turn is in history
before the next starts; (c') keeps turning while one Update is in flight. The workflow stays on
the shared queue (provision, score fallback, release and the `progress` query are
`EpisodeWorkflow`'s); the drive's heartbeat timeout is the worker-loss bound.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

from workflows.failures import is_worker_lost, lost_message

with workflow.unsafe.imports_passed_through():
    from bench.designs.baseline import TurnPerActivityEpisode
    from bench.designs.models import DriveInput, DriveResult
    from episodes import contract
    from episodes.types.io import EpisodeInput
    from episodes.types.results import ScoreResult, Termination, TurnResult


@workflow.defn(name="UpdateEpisode")
class UpdateEpisode(TurnPerActivityEpisode):
    def __init__(self) -> None:
        super().__init__()
        self._loop_score: ScoreResult | None = None

    @workflow.run
    async def run(self, inp: EpisodeInput):  # type: ignore[override]
        return await super().run(inp)

    PIPELINE = 0
    MAX_LAG_S = 0.0
    LINGER_MS = 0.0

    @workflow.update(name="record_turns")
    def record_turns(self, results: list[TurnResult]) -> bool:
        """Record finished turns (repeats are no-ops); False asks the loop to stop."""
        for result in results:
            if result.record.turn == len(self._turns):
                self._turns.append(result.record)
        self._set_details()
        return self._status == "running"

    @record_turns.validator
    def _check_turns(self, results: list[TurnResult]) -> None:
        # Rejected updates leave no trace in history.
        if results and results[0].record.turn > len(self._turns):
            raise ValueError(
                f"turn {results[0].record.turn} recorded before turn {len(self._turns)}"
            )

    async def _turn_loop(self, inp: EpisodeInput) -> tuple[Termination, str | None]:
        assert self._ref is not None
        ref, spec = self._ref, inp.spec
        lost = timedelta(seconds=spec.worker_lost_timeout_s)
        per_turn = spec.turn_timeout_s + 2 * spec.harness.stop_timeout_s + 30
        try:
            result = await workflow.execute_activity(
                "design_drive",
                DriveInput(
                    session_id=ref.session_id,
                    workflow_id=workflow.info().workflow_id,
                    run_id=workflow.info().run_id,
                    max_turns=spec.max_turns,
                    pipeline=self.PIPELINE,
                    max_lag_s=self.MAX_LAG_S,
                    linger_ms=self.LINGER_MS,
                ),
                result_type=DriveResult,
                task_queue=ref.task_queue,
                schedule_to_start_timeout=lost,
                heartbeat_timeout=lost,
                start_to_close_timeout=timedelta(
                    seconds=spec.max_turns * per_turn + spec.score_timeout_s
                ),
                retry_policy=RetryPolicy(
                    maximum_attempts=5,
                    initial_interval=timedelta(milliseconds=200),
                    non_retryable_error_types=[
                        contract.SESSION_NOT_FOUND,
                        contract.TURN_OUT_OF_ORDER,
                    ],
                ),
                summary=f"drive up to {spec.max_turns} turns",
            )
        except ActivityError as e:
            if is_worker_lost(e):
                return "worker_lost", lost_message(e, ref)
            raise
        # Updates still being handled finish before the workflow moves on.
        await workflow.wait_condition(workflow.all_handlers_finished)
        self._loop_score = result.score
        return result.termination, result.error

    async def _score(self, inp: EpisodeInput, error: str | None) -> ScoreResult:
        if self._loop_score is not None and self._termination != "worker_lost":
            return self._loop_score
        return await super()._score(inp, error)


@workflow.defn(name="UpdateAhead1Episode")
class UpdateAhead1Episode(UpdateEpisode):
    """(c'1) The next turn starts while the last one's Update is in flight (1 unrecorded)."""

    PIPELINE = 1

    @workflow.run
    async def run(self, inp: EpisodeInput):  # type: ignore[override]
        return await super().run(inp)


@workflow.defn(name="UpdateAhead32Episode")
class UpdateAhead32Episode(UpdateEpisode):
    """(c'32) Up to 32 turns unrecorded; each Update carries every finished turn."""

    PIPELINE = 32

    @workflow.run
    async def run(self, inp: EpisodeInput):  # type: ignore[override]
        return await super().run(inp)


@workflow.defn(name="UpdateLingerEpisode")
class UpdateLingerEpisode(UpdateEpisode):
    """(c'32+20ms) Up to 32 ahead; an Update waits 20 ms for more turns to join it."""

    PIPELINE = 32
    LINGER_MS = 20.0

    @workflow.run
    async def run(self, inp: EpisodeInput):  # type: ignore[override]
        return await super().run(inp)


@workflow.defn(name="UpdateLagEpisode")
class UpdateLagEpisode(UpdateEpisode):
    """(c'1s) History trails the harness by at most 1 s (and 256 turns).

    The loop waits only when an Update is slower than that, so fast turns never stall
    on the count bound the way K = 32 does when 32 turns take less than one Update.
    """

    PIPELINE = 256
    MAX_LAG_S = 1.0

    @workflow.run
    async def run(self, inp: EpisodeInput):  # type: ignore[override]
        return await super().run(inp)
