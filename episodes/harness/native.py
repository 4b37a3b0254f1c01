"""One live harness process, driven turn by turn over the wire protocol.

A misbehaving harness never raises out of `turn()`: crashes, timeouts and protocol
violations come back as a TurnRecord with `error_type`, after the session has
stopped the process itself. Only misuse (turn before start, after a failure, or
out of order) raises.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from typing import Any, Unpack

from episodes.errors import HarnessReportedError, ProtocolError
from episodes.harness.process import (
    EXIT_DRAIN_S,
    EventCallback,
    Exited,
    ProcessDriver,
    ProcessOptions,
)
from episodes.harness.protocol import PacketDecoder, encode, read_packet
from episodes.runtimes.base import Runtime


class _Unread(TimeoutError):
    """The turn's deadline passed while its message was still being written to stdin."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


class NativeDriver(ProcessDriver):
    name = "NativeDriver"
    noun = "harness"
    stopped_early = "harness was stopped before it became ready"
    # The protocol's request to exit, before stdin is closed and signals follow.
    farewell = encode({"type": "shutdown"})

    def __init__(
        self,
        runtime: Runtime,
        argv: list[str],
        *,
        max_packet_bytes: int = 16 * 1024 * 1024,
        **options: Unpack[ProcessOptions],
    ) -> None:
        super().__init__(runtime, argv, **options)
        self._decoder = PacketDecoder(max_packet_bytes)
        self._charged = 0  # of the decoder's bytes, those counted against the budget
        # The harness's `ready` said `resume: true`: it takes a `resume` packet.
        self.resumable = False

    # -- start ---------------------------------------------------------------------------

    async def _handshake(self, deadline: float) -> None:
        """Wait for `ready`."""
        packet = await self._next_packet(deadline)
        if packet["type"] != "ready":
            raise ProtocolError(f"expected a 'ready' packet first, got {packet['type']!r}")
        self.resumable = packet.get("resume") is True

    def _not_ready(self, e: BaseException) -> str | None:
        if isinstance(e, TimeoutError):
            return f"harness sent no 'ready' within {self.ready_timeout_s:g} s"
        if isinstance(e, Exited):
            return f"harness {e} before it sent 'ready'"
        if isinstance(e, ProtocolError):
            return f"protocol error before 'ready': {e.detail}"
        return None

    # -- turns ---------------------------------------------------------------------------

    def _encode_turn(self, n: int, message: Any) -> bytes:
        return encode({"type": "turn", "turn": n, "message": message})

    async def resume(self, transcript: list[dict[str, Any]], *, timeout_s: float) -> None:
        """Hand a `resume: true` harness the recorded turns (`{"turn", "message", "reply"}`
        each) before its next turn; it answers `resumed`. Raises HarnessFailure (stopped)."""
        if not self.resumable:
            raise RuntimeError("the harness did not declare resume: true in its ready packet")
        last = transcript[-1]["turn"] if transcript else None
        self._check_can_turn(last if last is not None else 0)
        data = encode({"type": "resume", "transcript": transcript})
        assert self._proc is not None
        self._busy = True
        try:
            await self._proc.write(data)
            packet = await self._next_packet(time.monotonic() + timeout_s)
            if packet["type"] != "resumed":
                raise ProtocolError(f"expected 'resumed' after 'resume', got {packet['type']!r}")
        except (TimeoutError, Exited, ProtocolError, BrokenPipeError, ConnectionError) as e:
            self._broken = "resume failed"
            await self.stop()
            if isinstance(e, (BrokenPipeError, ConnectionError)):
                e = Exited("exited")
            raise self._turn_failure(last or 0, e, timeout_s) from None
        finally:
            self._busy = False
        self._last_turn = last

    async def _exchange(
        self,
        n: int,
        data: bytes,
        events: list[Any],
        on_event: EventCallback | None,
        deadline: float,
    ) -> Any:
        assert self._proc is not None
        try:
            # Bounded too: a harness that stops reading stdin fills the pipe, and a large
            # message then blocks here, not in the wait for the reply.
            await asyncio.wait_for(self._proc.write(data), max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            raise _Unread(len(data)) from None
        except (BrokenPipeError, ConnectionError) as e:
            assert self._exit_task is not None
            await asyncio.wait({self._exit_task}, timeout=EXIT_DRAIN_S)
            raise Exited("exited" if self._exit_task.done() else "closed its stdin") from e
        while True:
            packet = await self._next_packet(deadline)
            # Charged as decoded (a packet decoded ahead is paid early): BudgetExceeded,
            # a ProtocolError, stops the harness before the next one is kept.
            self.budget.charge(self._decoder.consumed - self._charged)
            self._charged = self._decoder.consumed
            kind = packet["type"]
            if kind == "ready" or packet.get("turn") != n:
                raise ProtocolError(
                    f"unexpected {kind!r} packet for turn {packet.get('turn')!r} during turn {n}"
                )
            if kind == "event":
                events.append(packet["event"])
                if on_event is not None:
                    result = on_event(packet["event"])
                    if inspect.isawaitable(result):
                        await result
            elif kind == "reply":
                return packet["message"]
            else:
                raise HarnessReportedError(
                    f"harness reported an error in turn {n}: {packet['error']}",
                    stderr_tail=self.stderr_tail,
                )

    def _timeout_message(self, n: int, e: TimeoutError, timeout_s: float) -> str:
        if isinstance(e, _Unread):
            return f"harness did not read turn {n} ({e.size} bytes) within {timeout_s:g} s"
        return f"harness sent no reply to turn {n} within {timeout_s:g} s"

    async def _next_packet(self, deadline: float) -> dict[str, Any]:
        """Next packet; raises TimeoutError, Exited or ProtocolError."""
        assert self._proc is not None and self._exit_task is not None
        # Fast path: a packet the last read already decoded needs no task and no wait
        # (a harness streaming events sends dozens per read; issue 22 measured ~25 us a
        # packet for the task and the wait against ~5 us for decoding it).
        if time.monotonic() < deadline and (ready := self._decoder.pop_ready()) is not None:
            return ready
        reader = asyncio.ensure_future(read_packet(self._proc.stdout, self._decoder))
        try:
            if not self._exit_task.done():
                remaining = max(0.0, deadline - time.monotonic())
                await asyncio.wait(
                    {reader, self._exit_task},
                    timeout=remaining,
                    return_when=asyncio.FIRST_COMPLETED,
                )
            if not reader.done():
                if not self._exit_task.done():
                    raise TimeoutError
                # Exited: take what it wrote before dying, but don't wait for an EOF forever.
                await asyncio.wait({reader}, timeout=EXIT_DRAIN_S)
            if not reader.done():
                raise Exited("exited")
            packet = reader.result()
            if packet is None:
                # End of stdout usually means the process is exiting: say so if it did.
                await asyncio.wait({self._exit_task}, timeout=EXIT_DRAIN_S)
                raise Exited("exited" if self._exit_task.done() else "closed its stdout")
            return packet
        finally:
            if not reader.done():
                reader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reader
