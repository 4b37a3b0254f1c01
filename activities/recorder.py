"""Records a drive's finished turns in its workflow: `record_turns` Updates, in order.

The drive keeps turning while Updates are in flight; `wait_until_within(k, lag)` holds
it back once more than k finished turns (or more than 4 Updates' worth of bytes) are
unrecorded or the oldest of them finished `lag` seconds ago, so history trails the harness by a bounded amount, and a run asked to
continue-as-new grows by a bounded amount before the drive pauses. One Update at a
time carries every finished turn that fits in `max_update_bytes` (always at least
one), far from the server's 2 MB limit.

Update ids name the turns they carry (`<session>:turns-<first>-<last>`): the server
answers a repeated id with the first outcome, and the workflow rejects a batch it
already holds (a retried drive replaying its session's record) without a trace.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import pydantic_core
from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from episodes import contract
from episodes.types.results import TurnResult


class TurnRecorder:
    """The `drive` activity's `episodes.session.drive.TurnSink`: turns go to the workflow
    in `record_turns` Updates, and its answer (`stop`) pauses the loop."""

    def __init__(
        self,
        handle: WorkflowHandle,
        session_id: str,
        *,
        max_update_bytes: int,
        linger_s: float = 0.0,
    ) -> None:
        self.handle = handle
        # An Update waits until its oldest turn is this old: fast turns share one, and
        # a short episode's turns all ride on the drive's result (`finish`), none on an Update.
        self.linger_s = linger_s
        self.session_id = session_id
        self.max_update_bytes = max_update_bytes
        # Finished turns not yet acknowledged by the workflow, oldest first, with sizes.
        self._pending: list[tuple[TurnResult, int]] = []
        self._finished_at: list[float] = []  # when each pending turn was added
        self._pending_bytes = 0
        self.max_pending_bytes = 4 * max_update_bytes
        self.stop = False  # the workflow asked the drive to pause
        self._sender: asyncio.Task[None] | None = None
        self._acked = asyncio.Event()
        self._closing = False  # finish(): no new Update beyond the one in flight
        self._lingering = False

    @property
    def unrecorded(self) -> int:
        return len(self._pending)

    def add(self, result: TurnResult, *, send: bool = True) -> None:
        """A finished turn; `send` False: do not start an Update for it (the drive's
        last turn, which its result will carry)."""
        size = len(pydantic_core.to_json(result))
        self._pending.append((result, size))
        self._finished_at.append(time.monotonic())
        self._pending_bytes += size
        if send:
            self._ensure_sender()

    def _behind(self, limit: int, lag_s: float) -> bool:
        if len(self._pending) > limit:
            return True
        if len(self._pending) > 1 and self._pending_bytes > self.max_pending_bytes:
            return True
        return bool(lag_s and self._pending) and (time.monotonic() - self._finished_at[0] >= lag_s)

    async def wait_until_within(self, limit: int, lag_s: float = 0.0) -> None:
        """Return once at most `limit` finished turns (and not too many bytes) are
        unrecorded and, with `lag_s`, the oldest of them finished less than `lag_s` ago."""
        while self._behind(limit, lag_s):
            self._ensure_sender()
            assert self._sender is not None
            self._acked.clear()
            acked = asyncio.ensure_future(self._acked.wait())
            try:
                await asyncio.wait({acked, self._sender}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                acked.cancel()
        self._ensure_sender()

    async def flush(self) -> None:
        await self.wait_until_within(0)

    async def finish(self) -> list[TurnResult]:
        """The drive is ending: let the Update in flight land (a lingering one is not
        sent), send more only while the rest exceeds one batch, and hand back the rest
        for the drive's result to carry (one Update and workflow task fewer per episode)."""
        self._closing = True
        sender = self._sender
        if sender is not None and not sender.done():
            if self._lingering:
                sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait({sender})
        if sender is not None and sender.done() and not sender.cancelled():
            sender.result()  # a failed Update fails the drive, here
        while self._pending_bytes > self.max_update_bytes and len(self._pending) > 1:
            await self._send_batch()
        rest = [result for result, _ in self._pending]
        self._pending, self._finished_at, self._pending_bytes = [], [], 0
        return rest

    def close(self) -> None:
        """The drive is over without `finish` (cancelled, or failed): stop sending. A
        sender that already failed has its exception taken here; the drive reports its
        own end, and an unretrieved one would be logged as a stray traceback."""
        sender = self._sender
        if sender is None:
            return
        # Taken when it ends: the SDK turns a cancelled Update call into an error of its
        # own (WorkflowUpdateRPCTimeoutOrCancelledError), so a cancelled sender may end
        # with an exception nobody awaits, not as cancelled.
        sender.add_done_callback(_take_exception)
        sender.cancel()

    def _ensure_sender(self) -> None:
        if self._sender is not None and self._sender.done():
            self._sender.result()  # a failed Update fails the drive, here
        if self._pending and (self._sender is None or self._sender.done()):
            self._sender = asyncio.create_task(self._send_all())

    def _next_batch(self) -> list[TurnResult]:
        batch: list[TurnResult] = []
        size = 0
        for result, n in self._pending:
            if batch and size + n > self.max_update_bytes:
                break
            batch.append(result)
            size += n
        return batch

    async def _send_all(self) -> None:
        while self._pending and not self._closing:
            if self.linger_s:
                wait = self._finished_at[0] + self.linger_s - time.monotonic()
                if wait > 0:
                    self._lingering = True
                    try:
                        await asyncio.sleep(wait)
                    finally:
                        self._lingering = False
                    continue
            await self._send_batch()

    async def _send_batch(self) -> None:
        batch = self._next_batch()
        first, last = batch[0].record.turn, batch[-1].record.turn
        try:
            go_on = await self.handle.execute_update(
                contract.RECORD_TURNS,
                batch,
                id=f"{self.session_id}:turns-{first}-{last}",
                result_type=bool,
            )
        except WorkflowUpdateFailedError as e:
            cause = e.cause
            if not (
                isinstance(cause, ApplicationError)
                and cause.type == contract.TURNS_ALREADY_RECORDED
            ):
                raise
            go_on = True  # a replayed batch: later ones carry the workflow's answer
        self._pending_bytes -= sum(n for _, n in self._pending[: len(batch)])
        del self._pending[: len(batch)]
        del self._finished_at[: len(batch)]
        self.stop = self.stop or not go_on
        self._acked.set()


def _take_exception(task: asyncio.Task[None]) -> None:
    if not task.cancelled():
        task.exception()
