"""Session-side activities the prototype designs add to the current ones.

All thin over `LiveSession`, like `activities/session.py`: a retried or replayed
turn returns the recorded result, so exactly-once holds whatever calls it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.session import SessionActivities, _heartbeat_until_cancelled
from bench.designs.models import DriveInput, DriveResult, WatchInput
from episodes.errors import TurnOutOfOrder
from episodes.types.io import ReleaseInput, ScoreInput, TurnInput
from episodes.types.results import ScoreResult, TurnResult


class DesignActivities(SessionActivities):
    """The current activities plus: local-activity turns, a session watch, a driven loop."""

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self._released: dict[str, asyncio.Event] = {}

    @activity.defn(name="release")
    async def release(self, inp: ReleaseInput) -> None:
        await super().release(inp)
        released = self._released.pop(inp.session_id, None)
        if released is not None:
            released.set()

    @activity.defn(name="turn_local")
    async def turn_local(self, inp: TurnInput) -> TurnResult:
        # No heartbeat: a local activity lives inside its workflow task on this worker.
        try:
            return await self._session(inp.session_id).turn(inp.turn)
        except TurnOutOfOrder as e:
            raise ApplicationError(str(e), type="TurnOutOfOrder", non_retryable=True) from None

    @activity.defn(name="score_local")
    async def score_local(self, inp: ScoreInput) -> ScoreResult:
        return await self._session(inp.session_id).score(inp.termination)

    @activity.defn(name="watch")
    async def watch(self, inp: WatchInput) -> None:
        """Heartbeat while this worker holds the session: its silence is the loss signal."""
        timeout = activity.info().heartbeat_timeout
        interval = max(0.2, timeout.total_seconds() / 3) if timeout else 5.0
        released = self._released.setdefault(inp.session_id, asyncio.Event())
        cancelled = asyncio.ensure_future(activity.wait_for_cancelled())
        try:
            while inp.session_id in self.registry and not released.is_set():
                activity.heartbeat()
                waiter = asyncio.ensure_future(released.wait())
                await asyncio.wait(
                    {waiter, cancelled}, timeout=interval, return_when=asyncio.FIRST_COMPLETED
                )
                waiter.cancel()
                if cancelled.done():
                    return  # the episode no longer needs watching
        finally:
            cancelled.cancel()
            self._released.pop(inp.session_id, None)

    # Named apart from the product's `drive` (inherited, and registered too): design (a)
    # "current" is the product's EpisodeWorkflow, which now drives with that one.
    @activity.defn(name="design_drive")
    async def design_drive(self, inp: DriveInput) -> DriveResult:
        """Run the turn loop here; record finished turns in the workflow with Updates.

        Update ids name the turns they carry, so a retried call is deduplicated by the
        server; the workflow ignores turns it already has; the session returns recorded
        turns unsent. With `pipeline`, one Update is in flight while the loop goes on.
        """
        session = self._session(inp.session_id)
        recorder = _Recorder(
            activity.client().get_workflow_handle(inp.workflow_id, run_id=inp.run_id),
            inp.session_id,
            linger_s=inp.linger_ms / 1000,
        )
        termination, error = "max_turns", None
        # Heartbeats go on while a long turn runs: their silence is the loss signal.
        beat = asyncio.create_task(_heartbeat_until_cancelled())
        try:
            for n in range(inp.max_turns):
                try:
                    result = await session.turn(n)
                except TurnOutOfOrder as e:
                    raise ApplicationError(
                        str(e), type="TurnOutOfOrder", non_retryable=True
                    ) from None
                recorder.add(result)
                # The next turn starts only while history is close enough behind.
                await recorder.wait_until_within(inp.pipeline, inp.max_lag_s)
                if result.observation.done:
                    termination, error = result.termination or "env_done", result.record.error
                    break
                if recorder.stop:
                    termination, error = "cancelled", "the workflow stopped the turn loop"
                    break
            await recorder.flush()
        finally:
            beat.cancel()
            recorder.close()
        score = await session.score(termination)  # type: ignore[arg-type]
        return DriveResult(termination=termination, error=error, score=score)  # type: ignore[arg-type]


class _Recorder:
    """Sends finished turns to the workflow in order, one Update (a batch) at a time."""

    def __init__(self, handle, session_id: str, linger_s: float = 0.0) -> None:  # type: ignore[no-untyped-def]
        self.handle = handle
        self.session_id = session_id
        self.linger_s = linger_s
        self.pending: list[TurnResult] = []
        # When each finished turn the workflow has not acknowledged yet finished.
        self._unrecorded: collections.deque[float] = collections.deque()
        self.stop = False
        self._sender: asyncio.Task[None] | None = None
        self._acked = asyncio.Event()
        self._hurry = asyncio.Event()  # the loop is waiting: stop lingering

    @property
    def unrecorded(self) -> int:
        return len(self._unrecorded)

    def add(self, result: TurnResult) -> None:
        self.pending.append(result)
        self._unrecorded.append(time.monotonic())
        self._ensure_sender()

    def _ensure_sender(self) -> None:
        if self._sender is not None and self._sender.done():
            self._sender.result()  # a failed Update fails the loop, here
        if self.pending and (self._sender is None or self._sender.done()):
            self._sender = asyncio.create_task(self._send_all())

    async def _send_all(self) -> None:
        while self.pending:
            if self.linger_s and not self._hurry.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._hurry.wait(), self.linger_s)
            self._hurry.clear()
            batch, self.pending = self.pending, []
            first, last = batch[0].record.turn, batch[-1].record.turn
            go_on = await self.handle.execute_update(
                "record_turns",
                batch,
                id=f"{self.session_id}:turns-{first}-{last}",
                result_type=bool,
            )
            for _ in batch:
                self._unrecorded.popleft()
            self.stop = self.stop or not go_on
            self._acked.set()

    def _behind(self, limit: int, lag_s: float) -> bool:
        if len(self._unrecorded) > limit:
            return True
        return bool(lag_s and self._unrecorded) and (
            time.monotonic() - self._unrecorded[0] >= lag_s
        )

    async def wait_until_within(self, limit: int, lag_s: float = 0.0) -> None:
        """Return once at most `limit` finished turns are unrecorded and (if `lag_s`) the
        oldest of them finished less than `lag_s` ago."""
        while self._behind(limit, lag_s):
            self._ensure_sender()
            assert self._sender is not None
            self._hurry.set()
            self._acked.clear()
            acked = asyncio.ensure_future(self._acked.wait())
            await asyncio.wait({acked, self._sender}, return_when=asyncio.FIRST_COMPLETED)
            acked.cancel()
        self._ensure_sender()

    async def flush(self) -> None:
        await self.wait_until_within(0)  # nothing more is coming: no lingering either

    def close(self) -> None:
        if self._sender is not None and not self._sender.done():
            self._sender.cancel()
