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
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any

from episodes.aio import finish
from episodes.errors import (
    HarnessCrashed,
    HarnessFailure,
    HarnessReportedError,
    HarnessStartFailed,
    ProtocolError,
    TurnTimeout,
)
from episodes.harness.protocol import READ_CHUNK_BYTES, PacketDecoder, encode, read_packet
from episodes.models import TurnRecord
from episodes.runtimes.base import Runtime, RuntimeProcess

# After the process exits, what it wrote is already in the pipe: this only bounds the
# wait for an EOF that a leftover grandchild (holding the pipe open) would withhold.
_EXIT_DRAIN_S = 1.0
_KILL_WAIT_S = 5.0


def _describe_exit(code: int | None) -> str:
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f", killed by {signal.Signals(-code).name}"
    return ""


async def _discard(stream) -> None:
    with contextlib.suppress(Exception):
        while await stream.read(READ_CHUNK_BYTES):
            pass


class _Exited(Exception):
    """The process exited (or closed stdout) while we waited for a packet."""


class _Unread(TimeoutError):
    """The turn's deadline passed while its message was still being written to stdin."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


class HarnessSession:
    def __init__(
        self,
        runtime: Runtime,
        argv: list[str],
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        ready_timeout_s: float = 30.0,
        stop_timeout_s: float = 5.0,
        max_packet_bytes: int = 16 * 1024 * 1024,
        stderr_tail_bytes: int = 8192,
    ) -> None:
        self.runtime = runtime
        self.argv = list(argv)
        self.env = env
        self.cwd = cwd
        self.ready_timeout_s = ready_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.stderr_tail_bytes = stderr_tail_bytes
        self._decoder = PacketDecoder(max_packet_bytes)
        self._proc: RuntimeProcess | None = None
        self._exit_task: asyncio.Task[int] | None = None
        self._stderr_task: asyncio.Task[None] | None = None
        self._stderr = bytearray()
        self._started = False
        self._ready = False
        self._busy = False
        self._broken: str | None = None  # why turns are refused from now on
        self._last_turn: int | None = None
        self._stop_task: asyncio.Task[None] | None = None
        # The harness's `ready` said `resume: true`: it takes a `resume` packet.
        self.resumable = False

    # -- state ---------------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        return (
            self._ready
            and self._stop_task is None
            and self._proc is not None
            and self._proc.returncode is None
        )

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode if self._proc is not None else None

    @property
    def stderr_tail(self) -> str:
        return bytes(self._stderr).decode("utf-8", errors="replace")

    # -- start ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the process and wait for `ready`. Raises HarnessStartFailed (session stopped)."""
        if self._started:
            raise RuntimeError("HarnessSession.start() was already called")
        self._started = True
        try:
            proc = await self.runtime.open_process(self.argv, self.env, self.cwd)
        except OSError as e:
            self._broken = "start failed"
            raise HarnessStartFailed(f"could not start harness {self.argv[0]!r}: {e}") from e
        self._proc = proc
        self._exit_task = asyncio.ensure_future(proc.wait())
        self._stderr_task = asyncio.ensure_future(self._drain_stderr(proc))
        if self._stop_task is not None:
            # stop() ran while the process was being opened and found none: stop again.
            await self.stop()
            self._stop_task = None
            await self.stop()
            raise HarnessStartFailed("harness was stopped before it became ready")
        deadline = time.monotonic() + self.ready_timeout_s
        try:
            packet = await self._next_packet(deadline)
            if packet["type"] != "ready":
                raise ProtocolError(f"expected a 'ready' packet first, got {packet['type']!r}")
            self.resumable = packet.get("resume") is True
        except BaseException as e:
            self._broken = "start failed"
            stopped_by_caller = self._stop_task is not None
            await self.stop()
            if stopped_by_caller and not isinstance(e, asyncio.CancelledError):
                failure = "harness was stopped before it became ready"
            elif isinstance(e, TimeoutError):
                failure = f"harness sent no 'ready' within {self.ready_timeout_s:g} s"
            elif isinstance(e, _Exited):
                failure = f"harness {e} before it sent 'ready'"
            elif isinstance(e, ProtocolError):
                failure = f"protocol error before 'ready': {e.detail}"
            else:
                raise
            raise HarnessStartFailed(
                failure + _describe_exit(self.returncode),
                stderr_tail=self.stderr_tail,
                exit_code=self.returncode,
            ) from None
        self._ready = True

    # -- turns ---------------------------------------------------------------------------

    async def turn(
        self,
        n: int,
        message: Any,
        *,
        timeout_s: float,
        on_event: Callable[[Any], Awaitable[None] | None] | None = None,
    ) -> TurnRecord:
        """Send turn `n`, stream its events, return its record (errors included, not raised)."""
        self._check_can_turn(n)
        data = encode({"type": "turn", "turn": n, "message": message})  # bad JSON: caller's bug
        self._busy = True
        self._last_turn = n
        started = time.monotonic()
        events: list[Any] = []
        reply: Any = None
        failure: HarnessFailure | None = None
        try:
            reply = await self._exchange(n, data, events, on_event, started + timeout_s)
        except HarnessReportedError as e:
            failure = e
        except (TimeoutError, _Exited, ProtocolError) as e:
            self._broken = f"turn {n} failed"
            await self.stop()
            failure = self._turn_failure(n, e, timeout_s)
        except BaseException:
            # Cancelled (or on_event raised) mid-turn: the stream position is unknown.
            self._broken = f"turn {n} was interrupted"
            raise
        finally:
            self._busy = False
        return TurnRecord(
            turn=n,
            message=message,
            events=events,
            reply=reply,
            error=str(failure) if failure else None,
            error_type=failure.error_type if failure else None,
            duration_ms=(time.monotonic() - started) * 1000,
        )

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
        except (TimeoutError, _Exited, ProtocolError, BrokenPipeError, ConnectionError) as e:
            self._broken = "resume failed"
            await self.stop()
            if isinstance(e, (BrokenPipeError, ConnectionError)):
                e = _Exited("exited")
            raise self._turn_failure(last or 0, e, timeout_s) from None
        finally:
            self._busy = False
        self._last_turn = last

    def _check_can_turn(self, n: int) -> None:
        if not self._ready:
            raise RuntimeError("HarnessSession.turn() before a successful start()")
        if self._busy:
            raise RuntimeError("another turn is still in progress on this session")
        if self._broken is not None:
            raise RuntimeError(f"the harness session is unusable: {self._broken}")
        if self._stop_task is not None:
            raise RuntimeError("the harness session was stopped")
        if self._last_turn is not None and n <= self._last_turn:
            raise RuntimeError(f"turn index must increase: got {n} after {self._last_turn}")

    async def _exchange(self, n, data, events, on_event, deadline) -> Any:
        assert self._proc is not None
        try:
            # Bounded too: a harness that stops reading stdin fills the pipe, and a large
            # message then blocks here, not in the wait for the reply.
            await asyncio.wait_for(self._proc.write(data), max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            raise _Unread(len(data)) from None
        except (BrokenPipeError, ConnectionError) as e:
            assert self._exit_task is not None
            await asyncio.wait({self._exit_task}, timeout=_EXIT_DRAIN_S)
            raise _Exited("exited" if self._exit_task.done() else "closed its stdin") from e
        while True:
            packet = await self._next_packet(deadline)
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

    def _turn_failure(self, n: int, e: BaseException, timeout_s: float) -> HarnessFailure:
        tail, code = self.stderr_tail, self.returncode
        if isinstance(e, _Unread):
            return TurnTimeout(
                f"harness did not read turn {n} ({e.size} bytes) within {timeout_s:g} s",
                stderr_tail=tail,
            )
        if isinstance(e, TimeoutError):
            return TurnTimeout(
                f"harness sent no reply to turn {n} within {timeout_s:g} s", stderr_tail=tail
            )
        if isinstance(e, ProtocolError):
            return ProtocolError(f"protocol error in turn {n}: {e.detail}", stderr_tail=tail)
        return HarnessCrashed(
            f"harness {e} during turn {n}{_describe_exit(code)}", stderr_tail=tail, exit_code=code
        )

    async def _next_packet(self, deadline: float) -> dict[str, Any]:
        """Next packet; raises TimeoutError, _Exited or ProtocolError."""
        assert self._proc is not None and self._exit_task is not None
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
                await asyncio.wait({reader}, timeout=_EXIT_DRAIN_S)
            if not reader.done():
                raise _Exited("exited")
            packet = reader.result()
            if packet is None:
                # End of stdout usually means the process is exiting: say so if it did.
                await asyncio.wait({self._exit_task}, timeout=_EXIT_DRAIN_S)
                raise _Exited("exited" if self._exit_task.done() else "closed its stdout")
            return packet
        finally:
            if not reader.done():
                reader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reader

    async def _drain_stderr(self, proc: RuntimeProcess) -> None:
        limit = self.stderr_tail_bytes
        with contextlib.suppress(Exception):
            while chunk := await proc.stderr.read(READ_CHUNK_BYTES):
                self._stderr += chunk
                if len(self._stderr) > limit:
                    del self._stderr[: len(self._stderr) - limit]

    # -- stop ----------------------------------------------------------------------------

    async def stop(self) -> None:
        """Stop the harness: shutdown -> SIGTERM -> SIGKILL, each wait bounded. Idempotent."""
        if self._stop_task is None:
            self._stop_task = asyncio.ensure_future(self._cleanup())
        await finish(self._stop_task)

    async def _cleanup(self) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.returncode is None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(
                    proc.write(encode({"type": "shutdown"})), self.stop_timeout_s
                )
            with contextlib.suppress(Exception):
                await asyncio.wait_for(proc.close_stdin(), self.stop_timeout_s)
            if not await self._exited_within(self.stop_timeout_s):
                await proc.terminate()
                if not await self._exited_within(self.stop_timeout_s):
                    await proc.kill()
                    await self._exited_within(_KILL_WAIT_S)
        await proc.kill()  # sweep whatever the harness left in its process group
        # Both pipes reach EOF once the group is gone: keep stderr's last words, and read
        # stdout to its end so the runtime can release the pipe.
        stdout_task = asyncio.ensure_future(_discard(proc.stdout))
        for task in (self._stderr_task, stdout_task, self._exit_task):
            if task is not None and not task.done():
                await asyncio.wait({task}, timeout=_EXIT_DRAIN_S)
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    async def _exited_within(self, timeout_s: float) -> bool:
        assert self._exit_task is not None
        await asyncio.wait({self._exit_task}, timeout=timeout_s)
        return self._exit_task.done()
