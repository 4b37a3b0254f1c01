"""Designs (b) and (d): the turn loop runs in a child workflow on the session's queue.

The parent (`EpisodeWorkflow`'s provision/score/release, unchanged) starts
`SessionLoop` on `SessionRef.task_queue`, so the loop's workflow tasks run on the
worker that holds the live session, and a turn never crosses queues:
- (b) `ChildLocalEpisode`: turns are LOCAL activities. Several can complete inside
  one workflow task; the child tells the parent about finished turns with a signal
  (at most one in flight, so they batch).
- (b') `ChildLocalSyncEpisode`: the same, but each turn's signal is awaited, which
  forces one workflow task per turn: every turn is in both histories before the
  next one starts.
- (d) `ChildEagerEpisode`: turns are normal activities on the child's own queue,
  which the SDK dispatches eagerly to this same worker.
A child on a dead worker's queue would wait forever, so the parent also runs one
long `watch` activity on the session queue: its heartbeat timeout is the loss bound.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ChildWorkflowError, is_cancelled_exception
from temporalio.workflow import ActivityCancellationType, ParentClosePolicy

from workflows.failures import is_worker_lost, lost_message

with workflow.unsafe.imports_passed_through():
    from bench.designs.baseline import TurnPerActivityEpisode
    from bench.designs.models import LoopInput, LoopResult, WatchInput
    from episodes import contract
    from episodes.types.io import EpisodeInput, ScoreInput, TurnInput
    from episodes.types.results import ScoreResult, Termination, TurnRecord, TurnResult


class _ChildEpisode(TurnPerActivityEpisode):
    MODE = "local"
    SYNC = False
    # The child's workflow task timeout. Core completes a workflow task that is busy
    # with local activities at 80% of it: the bound on how long finished turns wait
    # to reach history (and the parent) while the loop keeps running.
    CHILD_TASK_TIMEOUT_S = 10.0

    def __init__(self) -> None:
        super().__init__()
        self._loop_score: ScoreResult | None = None
        self._watch: asyncio.Task[None] | None = None

    @workflow.signal(name="turns")
    def on_turns(self, records: list[TurnRecord]) -> None:
        for record in records:
            if record.turn == len(self._turns):  # duplicates and gaps are ignored
                self._turns.append(record)
        self._set_details()

    async def _turn_loop(self, inp: EpisodeInput) -> tuple[Termination, str | None]:
        assert self._ref is not None
        ref, spec = self._ref, inp.spec
        lost = timedelta(seconds=spec.worker_lost_timeout_s)
        child = await workflow.start_child_workflow(
            "SessionLoop",
            LoopInput(
                spec=spec,
                task=inp.task,
                ref=ref,
                parent_id=workflow.info().workflow_id,
                mode=self.MODE,  # type: ignore[arg-type]
                sync=self.SYNC,
            ),
            id=f"{workflow.info().workflow_id}:session",
            task_queue=ref.task_queue,
            result_type=LoopResult,
            # The parent outlives a lost worker; closing it must not leave the child behind.
            parent_close_policy=ParentClosePolicy.TERMINATE,
            task_timeout=timedelta(seconds=self.CHILD_TASK_TIMEOUT_S),
        )
        watch = self._watch = workflow.start_activity(
            "watch",
            WatchInput(session_id=ref.session_id),
            task_queue=ref.task_queue,
            schedule_to_start_timeout=lost,
            heartbeat_timeout=lost,
            start_to_close_timeout=timedelta(days=7),
            retry_policy=RetryPolicy(maximum_attempts=1),
            cancellation_type=ActivityCancellationType.TRY_CANCEL,
            summary="watch the session's worker",
        )
        try:
            await workflow.wait([child, watch], return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            child.cancel()
            watch.cancel()
            raise
        if not child.done():
            # The watch ended first: its heartbeat or start timed out, or the session left.
            error = watch.exception()
            why = (
                lost_message(error, ref)
                if isinstance(error, ActivityError)
                else f"session {ref.session_id} left worker {ref.worker_id}"
            )
            return "worker_lost", why
        try:
            result = child.result()
        except ChildWorkflowError as e:
            if is_cancelled_exception(e):
                raise asyncio.CancelledError from None
            raise
        self._turns = result.turns
        self._loop_score = result.score
        return result.termination, result.error

    async def _score(self, inp: EpisodeInput, error: str | None) -> ScoreResult:
        if self._loop_score is not None and self._termination != "worker_lost":
            return self._loop_score
        return await super()._score(inp, error)

    async def _release(self, ref) -> None:  # type: ignore[no-untyped-def]
        await super()._release(ref)
        # The watch ends when the release lands; waiting for it keeps its completion
        # from arriving after this workflow closed.
        if self._watch is not None:
            try:
                await self._watch
            except (ActivityError, asyncio.CancelledError):
                pass


@workflow.defn(name="ChildLocalEpisode")
class ChildLocalEpisode(_ChildEpisode):
    MODE = "local"
    SYNC = False

    @workflow.run
    async def run(self, inp: EpisodeInput):  # type: ignore[override]
        return await super().run(inp)


@workflow.defn(name="ChildLocal2sEpisode")
class ChildLocal2sEpisode(_ChildEpisode):
    """(b, 2 s) A 2 s child task timeout: finished turns reach history within ~1.6 s."""

    MODE = "local"
    CHILD_TASK_TIMEOUT_S = 2.0

    @workflow.run
    async def run(self, inp: EpisodeInput):  # type: ignore[override]
        return await super().run(inp)


@workflow.defn(name="ChildLocalSyncEpisode")
class ChildLocalSyncEpisode(_ChildEpisode):
    MODE = "local"
    SYNC = True

    @workflow.run
    async def run(self, inp: EpisodeInput):  # type: ignore[override]
        return await super().run(inp)


@workflow.defn(name="ChildEagerEpisode")
class ChildEagerEpisode(_ChildEpisode):
    MODE = "eager"
    SYNC = False

    @workflow.run
    async def run(self, inp: EpisodeInput):  # type: ignore[override]
        return await super().run(inp)


@workflow.defn(name="SessionLoop")
class SessionLoop:
    """The turn loop, on the session's own queue. Returns every turn and the score."""

    def __init__(self) -> None:
        self._turns: list[TurnRecord] = []
        self._unsent: list[TurnRecord] = []
        self._sending: asyncio.Task[None] | None = None

    @workflow.query(name="progress_turns")
    def progress_turns(self) -> int:
        return len(self._turns)

    @workflow.run
    async def run(self, inp: LoopInput) -> LoopResult:
        parent = workflow.get_external_workflow_handle(inp.parent_id)
        termination: Termination = "max_turns"
        error: str | None = None
        for n in range(inp.spec.max_turns):
            try:
                result = await self._turn(inp, n)
            except ActivityError as e:
                if not is_worker_lost(e):
                    raise
                termination, error = "worker_lost", lost_message(e, inp.ref)
                break
            self._turns.append(result.record)
            self._unsent.append(result.record)
            if inp.sync:
                await self._send(parent)
            elif self._sending is None or self._sending.done():
                self._sending = asyncio.create_task(self._send(parent))
            if result.observation.done:
                termination = result.termination or "env_done"
                error = result.record.error
                break
        if self._sending is not None:
            await self._sending
        score = None
        if termination != "worker_lost":
            score = await self._score(inp, termination)
        return LoopResult(turns=self._turns, termination=termination, error=error, score=score)

    async def _send(self, parent) -> None:  # type: ignore[no-untyped-def]
        while self._unsent:
            batch, self._unsent = self._unsent, []
            await parent.signal("turns", batch)

    async def _turn(self, inp: LoopInput, n: int) -> TurnResult:
        spec = inp.spec
        backstop = timedelta(seconds=spec.turn_timeout_s + 2 * spec.harness.stop_timeout_s + 30)
        retry = RetryPolicy(
            maximum_attempts=5,
            initial_interval=timedelta(milliseconds=200),
            non_retryable_error_types=[contract.SESSION_NOT_FOUND, contract.TURN_OUT_OF_ORDER],
        )
        arg = TurnInput(session_id=inp.ref.session_id, turn=n)
        if inp.mode == "local":
            return await workflow.execute_local_activity(
                "turn_local",
                arg,
                result_type=TurnResult,
                start_to_close_timeout=backstop,
                retry_policy=retry,
                summary=f"turn {n}",
            )
        lost = timedelta(seconds=spec.worker_lost_timeout_s)
        return await workflow.execute_activity(
            "turn",
            arg,
            result_type=TurnResult,
            schedule_to_start_timeout=lost,
            heartbeat_timeout=lost,
            start_to_close_timeout=backstop,
            retry_policy=retry,
            summary=f"turn {n}",
        )

    async def _score(self, inp: LoopInput, termination: Termination) -> ScoreResult:
        arg = ScoreInput(session_id=inp.ref.session_id, termination=termination)
        timeout = timedelta(seconds=inp.spec.score_timeout_s)
        retry = RetryPolicy(
            maximum_attempts=3, non_retryable_error_types=[contract.SESSION_NOT_FOUND]
        )
        if inp.mode == "local":
            return await workflow.execute_local_activity(
                "score_local",
                arg,
                result_type=ScoreResult,
                start_to_close_timeout=timeout,
                retry_policy=retry,
            )
        return await workflow.execute_activity(
            "score",
            arg,
            result_type=ScoreResult,
            start_to_close_timeout=timeout,
            retry_policy=retry,
        )
