"""Process plumbing that every harness driver needs, whatever it speaks on stdio.

The native driver (`session.py`) and the ACP driver (`acp.py`) differ only in what
goes over stdin/stdout. `ProcessDriver` holds the rest, once: opening the process,
its state, the checks before a turn, how a failed start or turn is worded, the
stderr tail and the stop escalation, so both end a misbehaving process the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, TypedDict, Unpack

from episodes.aio import finish
from episodes.errors import (
    BoxLost,
    HarnessCrashed,
    HarnessFailure,
    HarnessReportedError,
    HarnessStartFailed,
    LimitExceeded,
    ProtocolError,
    TurnTimeout,
)
from episodes.harness.budget import StreamBudget
from episodes.harness.protocol import READ_CHUNK_BYTES
from episodes.runtimes.base import ByteStream, Runtime, RuntimeProcess
from episodes.types.results import TurnRecord

# What a driver calls with each harness event of a turn (sync or async).
EventCallback = Callable[[Any], Awaitable[None] | None]

# After the process exits, what it wrote is already in the pipe: this only bounds the
# wait for an EOF that a leftover grandchild (holding the pipe open) would withhold.
EXIT_DRAIN_S = 1.0
KILL_WAIT_S = 5.0


def describe_exit(code: int | None) -> str:
    """`, killed by SIGKILL` for a signalled exit, else nothing (the code is shown apart)."""
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f", killed by {signal.Signals(-code).name}"
    return ""


async def discard(stream: ByteStream) -> None:
    with contextlib.suppress(Exception):
        while await stream.read(READ_CHUNK_BYTES):
            pass


class StderrTail:
    """Reads a process's stderr continuously (so it never blocks on a full pipe) and
    keeps only the last `limit` bytes, the part that explains a failure."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._buf = bytearray()
        self.task: asyncio.Task[None] | None = None

    def start(self, proc: RuntimeProcess) -> None:
        self.task = asyncio.ensure_future(self._drain(proc.stderr))

    @property
    def text(self) -> str:
        return bytes(self._buf).decode("utf-8", errors="replace")

    async def _drain(self, stream: ByteStream) -> None:
        with contextlib.suppress(Exception):
            while chunk := await stream.read(READ_CHUNK_BYTES):
                self._buf += chunk
                if len(self._buf) > self.limit:
                    del self._buf[: len(self._buf) - self.limit]


async def exited_within(exit_task: asyncio.Future[int], timeout_s: float) -> bool:
    await asyncio.wait({exit_task}, timeout=timeout_s)
    return exit_task.done()


async def escalate_stop(
    proc: RuntimeProcess,
    exit_task: asyncio.Future[int],
    stop_timeout_s: float,
    farewell: bytes | None = None,
) -> None:
    """Ask, then force: (farewell +) close stdin, wait; SIGTERM the group, wait; SIGKILL.

    Each wait is bounded, and the group is SIGKILLed at the end in any case, to sweep
    whatever the harness left behind in it.
    """
    if proc.returncode is None:
        if farewell is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(proc.write(farewell), stop_timeout_s)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(proc.close_stdin(), stop_timeout_s)
        if not await exited_within(exit_task, stop_timeout_s):
            await proc.terminate()
            if not await exited_within(exit_task, stop_timeout_s):
                await proc.kill()
                await exited_within(exit_task, KILL_WAIT_S)
    await proc.kill()


async def drain_after_exit(proc: RuntimeProcess, *tasks: asyncio.Future | None) -> None:
    """Once the group is gone both pipes reach EOF: let `tasks` (stderr tail, exit
    watcher) finish and read stdout to its end so the runtime can release the pipe.
    Each wait is bounded; a stdout reader of the caller's must be stopped before."""
    stdout_task = asyncio.ensure_future(discard(proc.stdout))
    for task in (*tasks, stdout_task):
        if task is not None and not task.done():
            await asyncio.wait({task}, timeout=EXIT_DRAIN_S)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


class Exited(Exception):
    """The process exited (or closed a pipe) while we waited for what it owed us."""


class ProcessOptions(TypedDict, total=False):
    """What every driver takes about its process; the defaults are ProcessDriver's."""

    env: dict[str, str] | None  # None: the runtime's own
    cwd: str | None
    ready_timeout_s: float  # 30: for the handshake
    stop_timeout_s: float  # 5: each step of the stop escalation
    stderr_tail_bytes: int  # 8192: how much of stderr a failure keeps
    budget: (
        StreamBudget | None
    )  # what it may stream (the spec's defaults); shared with the services


class ProcessDriver:
    """One harness process's lifecycle; a subclass adds what it speaks on stdio.

    A subclass names itself in the messages (`name`, `noun`, `stopped_early`), does its
    `_handshake` and words how it failed (`_not_ready`), does a turn's wire part
    (`_encode_turn`, `_exchange`) and words its timeouts (`_timeout_message`), and may
    hook `_attach` (the wire, once the process is open), `_end_turn` and `_detach`
    (before the pipes are drained).
    """

    name: ClassVar[str]  # the class the misuse errors name
    noun: ClassVar[str]  # what the failure messages call the program
    stopped_early: ClassVar[str]  # the start failure when stop() came first
    farewell: ClassVar[bytes | None] = None  # written before stdin is closed: "please exit"

    def __init__(
        self, runtime: Runtime, argv: list[str], **options: Unpack[ProcessOptions]
    ) -> None:
        self.runtime = runtime
        self.argv = list(argv)
        self.env = options.get("env")
        self.cwd = options.get("cwd")
        self.ready_timeout_s = options.get("ready_timeout_s", 30.0)
        self.stop_timeout_s = options.get("stop_timeout_s", 5.0)
        self._stderr = StderrTail(options.get("stderr_tail_bytes", 8192))
        self.budget = options.get("budget") or StreamBudget()
        self._proc: RuntimeProcess | None = None
        self._exit_task: asyncio.Task[int] | None = None
        self._started = self._ready = self._busy = False
        self._broken: str | None = None  # why turns are refused from now on
        self._last_turn: int | None = None
        self._stop_task: asyncio.Task[None] | None = None

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
        return self._stderr.text

    # -- start ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the process and do the handshake. Raises HarnessStartFailed (stopped)."""
        if self._started:
            raise RuntimeError(f"{self.name}.start() was already called")
        self._started = True
        try:
            proc = await self.runtime.open_process(self.argv, self.env, self.cwd)
        except OSError as e:
            self._broken = "start failed"
            raise HarnessStartFailed(f"could not start {self.noun} {self.argv[0]!r}: {e}") from e
        self._proc = proc
        self._exit_task = asyncio.ensure_future(proc.wait())
        self._stderr.start(proc)
        self._attach(proc)
        if self._stop_task is not None:
            # stop() ran while the process was being opened and found none: stop again.
            await self.stop()
            self._stop_task = None
            await self.stop()
            raise HarnessStartFailed(self.stopped_early)
        try:
            await self._handshake(time.monotonic() + self.ready_timeout_s)
        except BaseException as e:
            self._broken = "start failed"
            stopped_by_caller = self._stop_task is not None
            await self.stop()
            reason: str | None = self.stopped_early
            if not stopped_by_caller or isinstance(e, asyncio.CancelledError):
                reason = self._not_ready(e)
            if reason is None:
                raise  # not the harness's failure (cancelled, a bug): as it is
            raise HarnessStartFailed(
                reason + describe_exit(self.returncode),
                stderr_tail=self.stderr_tail,
                exit_code=self.returncode,
            ) from None
        self._ready = True

    def _attach(self, proc: RuntimeProcess) -> None:
        """Set up what speaks to the open process (before a stop() may need it)."""

    async def _handshake(self, deadline: float) -> None:
        """Whatever makes the open process ready for turns, by `deadline`."""
        raise NotImplementedError

    def _not_ready(self, e: BaseException) -> str | None:
        """Why the handshake failed, worded for the start failure; None: re-raise `e`."""
        raise NotImplementedError

    # -- turns ---------------------------------------------------------------------------

    def _check_can_turn(self, n: int) -> None:
        if not self._ready:
            raise RuntimeError(f"{self.name}.turn() before a successful start()")
        if self._busy:
            raise RuntimeError("another turn is still in progress on this session")
        if self._broken is not None:
            raise RuntimeError(f"the harness session is unusable: {self._broken}")
        if self._stop_task is not None:
            raise RuntimeError("the harness session was stopped")
        if self._last_turn is not None and n <= self._last_turn:
            raise RuntimeError(f"turn index must increase: got {n} after {self._last_turn}")

    async def turn(
        self, n: int, message: Any, *, timeout_s: float, on_event: EventCallback | None = None
    ) -> TurnRecord:
        """Run turn `n`, stream its events, return its record (errors included, not raised).

        A HarnessReportedError from `_exchange` is the turn's error (the process lives on);
        a TimeoutError, Exited or ProtocolError stops the process first.
        """
        self._check_can_turn(n)
        wire = self._encode_turn(n, message)  # a message it cannot send: the caller's bug
        self._busy = True
        self._last_turn = n
        self.budget.begin_turn()
        started = time.monotonic()
        events: list[Any] = []
        reply: Any = None
        failure: HarnessFailure | None = None
        try:
            reply = await self._exchange(n, wire, events, on_event, started + timeout_s)
        except HarnessReportedError as e:
            failure = e
        except (TimeoutError, Exited, ProtocolError) as e:
            self._broken = f"turn {n} failed"
            # Asked before the stop: a box past a limit is still there to say which.
            over = await self.runtime.limit_exceeded()
            # And whether the box itself died under it, not by the harness's doing
            # (removed from outside, its engine gone): a failover, not a crash.
            lost = None
            if over is None and not isinstance(e, ProtocolError):
                lost = await self.runtime.box_lost()
            await self.stop()
            failure = self._turn_failure(n, e, timeout_s, over)
            if lost is not None:
                failure = BoxLost(f"turn {n}: {lost}", stderr_tail=self.stderr_tail)
        except BaseException:
            # Cancelled (or on_event raised) mid-turn: the harness's state is unknown.
            self._broken = f"turn {n} was interrupted"
            raise
        finally:
            self._busy = False
            self.budget.end_turn()
            self._end_turn()
        return TurnRecord(
            turn=n,
            message=message,
            events=events,
            reply=reply,
            error=str(failure) if failure else None,
            error_type=failure.error_type if failure else None,
            duration_ms=(time.monotonic() - started) * 1000,
        )

    def _encode_turn(self, n: int, message: Any) -> Any:
        """Turn `n`'s message as the wire takes it; raises if it cannot be sent."""
        raise NotImplementedError

    async def _exchange(
        self,
        n: int,
        wire: Any,
        events: list[Any],
        on_event: EventCallback | None,
        deadline: float,
    ) -> Any:
        """Send turn `n`, collect its events by `deadline`: its reply."""
        raise NotImplementedError

    def _end_turn(self) -> None:
        """After a turn, however it ended (the process may be stopped by now)."""

    def _turn_failure(
        self, n: int, e: BaseException, timeout_s: float, over: str | None = None
    ) -> HarnessFailure:
        tail, code = self.stderr_tail, self.returncode
        if over is not None:  # whatever the harness saw of it: the box's limit ended it
            return LimitExceeded(f"turn {n}: {over}", stderr_tail=tail, exit_code=code)
        if isinstance(e, TimeoutError):
            return TurnTimeout(self._timeout_message(n, e, timeout_s), stderr_tail=tail)
        if isinstance(e, ProtocolError):
            return ProtocolError(f"protocol error in turn {n}: {e.detail}", stderr_tail=tail)
        return HarnessCrashed(
            f"{self.noun} {e} during turn {n}{describe_exit(code)}",
            stderr_tail=tail,
            exit_code=code,
        )

    def _timeout_message(self, n: int, e: TimeoutError, timeout_s: float) -> str:
        raise NotImplementedError  # what timed out depends on the protocol

    # -- stop ----------------------------------------------------------------------------

    async def stop(self) -> None:
        """Stop the process and its group, each wait bounded (see `escalate_stop`). Idempotent."""
        if self._stop_task is None:
            self._stop_task = asyncio.ensure_future(self._cleanup())
        await finish(self._stop_task)

    async def _cleanup(self) -> None:
        proc = self._proc
        if proc is None:
            return
        assert self._exit_task is not None
        await escalate_stop(proc, self._exit_task, self.stop_timeout_s, self.farewell)
        await self._detach()
        await drain_after_exit(proc, self._stderr.task, self._exit_task)

    async def _detach(self) -> None:
        """Stop whatever reads the process's stdout, before the drain reads it to its end."""
