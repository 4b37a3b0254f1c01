"""Design (a), kept for the study: one `turn` activity per turn on the session queue.

The product's EpisodeWorkflow with its turn loop as it was before the drive design
shipped: provision, score, release, the `progress` query, the details and the
result are the product's own (`workflows.base.EpisodeBase`); only `run` (no drive,
no continue-as-new) and the loop differ. The other prototypes subclass this and
replace `_turn_loop`.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.exceptions import ActivityError, is_cancelled_exception

from workflows.base import EpisodeBase
from workflows.turn import WorkerLost, execute_turn

with workflow.unsafe.imports_passed_through():
    from episodes.types.io import EpisodeInput, TurnInput
    from episodes.types.results import EpisodeResult, ScoreResult, Termination, TurnResult


@workflow.defn(name="TurnPerActivityEpisode")
class TurnPerActivityEpisode(EpisodeBase):
    @workflow.run
    async def run(self, inp: EpisodeInput) -> EpisodeResult:
        spec = inp.spec
        self._max_turns = spec.max_turns
        started = workflow.now()
        error: str | None = None
        score = ScoreResult()
        try:
            error = await self._provision_or_outcome(inp)
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
        return self._finish(inp, started, error, score)

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
