"""Design (a), kept for the study: one `turn` activity per turn on the session queue.

The product's EpisodeWorkflow with its turn loop as it was before the drive design
shipped: provision, score, release, the `progress` query and the details are the
product's own; only `run` (no drive, no continue-as-new) and the loop differ. The
other prototypes subclass this and replace `_turn_loop`.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.exceptions import ActivityError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    from episodes import search_attributes as sa
    from episodes.messages import EpisodeInput, TurnInput
    from episodes.models import EpisodeResult, ScoreResult, Termination, TurnResult
    from workflows.episode import (
        HARNESS_FAILURES,
        SESSION_LOST,
        EpisodeWorkflow,
        _failure_message,
        _failure_type,
        _is_worker_lost,
        _lost_message,
    )
    from workflows.turn import WorkerLost, execute_turn

__all__ = [
    "SESSION_LOST",
    "EpisodeWorkflow",
    "TurnPerActivityEpisode",
    "_is_worker_lost",
    "_lost_message",
]


@workflow.defn(name="TurnPerActivityEpisode")
class TurnPerActivityEpisode(EpisodeWorkflow):
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

    async def _turn_loop(self, inp: EpisodeInput) -> tuple[Termination, str | None]:
        for n in range(inp.spec.max_turns):
            try:
                result = await self._turn(inp, n)
            except WorkerLost as e:
                return "worker_lost", str(e)
            self._turns.append(result.record)
            self._set_details()
            if result.observation.done:
                return result.termination or "env_done", result.record.error
        return "max_turns", None

    async def _turn(self, inp: EpisodeInput, n: int) -> TurnResult:
        assert self._ref is not None
        turn = TurnInput(session_id=self._ref.session_id, turn=n)
        return await execute_turn(self._ref, inp.spec, turn, f"turn {n}")
