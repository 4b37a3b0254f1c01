"""Process control for boxes whose exec API cannot signal a process group (Modal, Prime).

Every harness process is started through a small POSIX-sh wrapper (WRAPPER). The
wrapper forks; the child prints `<pid> <relay>` as its first stderr line and execs
`setsid program...`, so the program leads its own process group (setsid does not
fork there: a forked child is never a group leader). The wrapper waits for it and
exits with its status. terminate()/kill() run a second one-shot command in the box
(KILLER) that signals the group. If the pid cannot be had within a bound, or that
command cannot run, the box is destroyed (fail closed): a process we promised to
stop must not keep running, and acting, unseen.

Stdin EOF: in "relay" mode (Prime, whose protocol has no stdin EOF) the program
reads a FIFO that a `cat` relay fills from the real stdin; close_stdin() waits until
the relay has passed on every byte we wrote (its /proc io counter), then ends it.

Exit codes: the wrapper shell reports a signalled program as 128+n (so does Modal
for a signalled exec); see `process_io.exit_code`. A process whose box vanished
under it reports -9.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator
from typing import Any, Protocol

from episodes.runtimes.process_io import PumpedStream, StreamedProcess, exit_code

log = logging.getLogger(__name__)

# $1: "pipe" or "relay", then the program's argv.
WRAPPER = r"""m=$1; shift
l='echo "$$ $0" >&2; command -v setsid >/dev/null 2>&1 && exec setsid "$@"; exec "$@"'
exec 3<&0
r=-
if [ "$m" = relay ]; then
  f="${TMPDIR:-/tmp}/.episodes-stdin-$$"
  rm -f "$f"; mkfifo -m 600 "$f" || { echo "episodes: cannot make $f" >&2; exit 125; }
  cat <&3 >"$f" 3<&- &
  r=$!
  sh -c "$l" "$r" "$@" <"$f" 3<&- &
else
  sh -c "$l" "$r" "$@" <&3 3<&- &
fi
p=$!
exec 3<&-
wait "$p"; s=$?
if [ "$r" != - ]; then kill "$r" 2>/dev/null; rm -f "$f"; fi
exit "$s"
"""

# $1: signal number, $2: pid (= pgid), $3: "group" to spare the bare pid, which may
# have been reused once the program exited.
KILLER = r"""kill -"$1" -"$2" 2>/dev/null && exit 0
[ "$3" = group ] || kill -"$1" "$2" 2>/dev/null
exit 0
"""

# $1: relay pid, $2: bytes written to stdin so far. Ends the relay once it has
# written them all into the FIFO (bounded: a program that stops reading loses the rest).
CLOSER = r"""i=0
while [ "$i" -lt 100 ]; do
  w=
  while read -r k v; do [ "$k" = wchar: ] && w=$v; done 2>/dev/null <"/proc/$1/io"
  [ -n "$w" ] && [ "$w" -lt "$2" ] || break
  sleep 0.1; i=$((i+1))
done
kill "$1" 2>/dev/null
exit 0
"""

PID_WAIT_S = 30.0
WRITE_CHUNK = 1024 * 1024
_background: set[asyncio.Future[None]] = set()  # strong refs: the loop keeps only weak ones
CONTROL_TIMEOUT_S = 30.0


class Controls(Protocol):
    """What a process needs of its box (a `remote_box.RemoteBox`)."""

    async def run_control(self, script: str, args: list[str]) -> int: ...

    async def destroy(self) -> None: ...


class RemoteShellProcess(StreamedProcess):
    """A wrapped process in a remote box; subclasses supply the SDK's stream calls.

    Control commands and destroying the box (fail closed) go through the box, a
    `remote_box.RemoteBox`.
    """

    def __init__(
        self, box: Controls, name: str, stdout: AsyncIterator[bytes], stderr: AsyncIterator[bytes]
    ) -> None:
        super().__init__(
            PumpedStream(stdout, f"{name} stdout"),
            PumpedStream(stderr, f"{name} stderr", header=True),
        )
        self.name = name
        self._box = box
        self._relay: int | None = None
        self._written = 0
        self._stdin_closed = False
        self._swept = False
        self._watch = asyncio.ensure_future(self._watch_exit())

    # -- what a backend provides -------------------------------------------------
    @abc.abstractmethod
    async def _raw_write(self, data: bytes) -> None: ...

    @abc.abstractmethod
    async def _raw_close_stdin(self) -> None:
        """EOF through the SDK; relay-mode backends leave this unused."""

    @abc.abstractmethod
    async def _raw_wait(self) -> int:
        """The wrapper's exit code as the SDK reports it."""

    async def release(self) -> None:
        """Free the SDK handle once the box is gone (if it holds anything)."""

    # -- through the box -------------------------------------------------------------
    async def _run_control(self, script: str, args: list[str]) -> int:
        """Run `sh -c script sh *args` once in the same box; its exit code."""
        return await self._box.run_control(script, args)

    async def _fail_closed(self, reason: str) -> None:
        """Destroy the whole box: the process could not be controlled."""
        await self._box.destroy()

    # -- RuntimeProcess ------------------------------------------------------------
    _out: PumpedStream
    _err: PumpedStream

    @property
    def finished(self) -> bool:
        """Exited, and nothing of its group is left to sweep (or nothing can be signalled)."""
        return self._exit.done() and (self._swept or self._pid is None)

    async def started(self) -> None:
        """Learn the pid (first stderr line); fail closed if it does not come in time."""
        try:
            line = await asyncio.wait_for(asyncio.shield(self._err.header), PID_WAIT_S)
        except TimeoutError:
            reason = f"{self.name} did not report its pid within {PID_WAIT_S:.0f}s"
            log.warning("%s; destroying its box (fail closed)", reason)
            await self._fail_closed(reason)
            raise RuntimeError(f"{reason}; the box was destroyed") from None
        pid, _, relay = (line or b"").decode(errors="replace").partition(" ")
        if not pid.isdigit():
            # The wrapper could not start the program; wait() and stderr tell why.
            if line is not None:
                self._err.unread(line + b"\n")
            return
        self._pid = int(pid)
        self._relay = int(relay) if relay.isdigit() else None

    async def start_or_discard(self) -> None:
        """started(); if the opener is cancelled meanwhile, kill the process once it
        reports its pid (nobody holds a handle to stop it otherwise)."""
        task = asyncio.ensure_future(self.started())
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            _background.add(asyncio.ensure_future(self._discard(task)))
            raise

    async def _discard(self, started: asyncio.Future[None]) -> None:
        with contextlib.suppress(BaseException):
            await started
            await self.kill()
        _background.discard(asyncio.current_task())

    async def write(self, data: bytes) -> None:
        if self._stdin_closed or self._exit.done():
            raise BrokenPipeError(f"stdin of {self.name} is closed")
        if not data:
            return
        # A write into a process that stops reading blocks; its exit must release it,
        # whatever the SDK does with a pending stdin call then.
        writing = asyncio.ensure_future(self._write_all(bytes(data)))
        try:
            either: set[asyncio.Future[Any]] = {writing, self._exit}  # None and int results
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not writing.done():
                writing.cancel()
                with contextlib.suppress(BaseException):
                    await writing
        if writing.cancelled():
            raise BrokenPipeError(f"{self.name} exited before reading its stdin")
        try:
            writing.result()
        except (BrokenPipeError, ConnectionResetError):
            raise
        except Exception as e:
            # The SDKs report a gone process in their own words (ValueError, API errors).
            raise BrokenPipeError(f"stdin of {self.name} failed: {e}") from e

    async def _write_all(self, data: bytes) -> None:
        # Bounded calls: Modal buffers at most 16 MiB per drain, RPCs have size limits.
        for start in range(0, len(data), WRITE_CHUNK):
            chunk = data[start : start + WRITE_CHUNK]
            await self._raw_write(chunk)
            self._written += len(chunk)

    async def close_stdin(self) -> None:
        if self._stdin_closed:
            return
        self._stdin_closed = True
        if self._exit.done():
            return
        try:
            if self._relay is not None:
                await asyncio.wait_for(
                    self._run_control(CLOSER, [str(self._relay), str(self._written)]),
                    CONTROL_TIMEOUT_S,
                )
            else:
                await self._raw_close_stdin()
        except Exception as e:
            log.warning("could not close stdin of %s: %s", self.name, e)

    async def wait(self) -> int:
        return await asyncio.shield(self._exit)

    async def terminate(self) -> None:
        await self._signal(signal.SIGTERM)

    async def kill(self) -> None:
        await self._signal(signal.SIGKILL)

    # -- internals -------------------------------------------------------------------
    async def _watch_exit(self) -> None:
        try:
            code = exit_code(await self._raw_wait())
        except Exception as e:
            log.warning("lost %s (its box is gone?): %s", self.name, e)
            code = -signal.SIGKILL
        self._set_exit(code)

    def abandon(self) -> None:
        """The box is gone: report the process as killed with it and stop the pumps."""
        self._set_exit(-signal.SIGKILL)
        self._swept = True  # everything in the box died with it
        self._watch.cancel()
        self._out.close()
        self._err.close()

    async def _signal(self, sig: int) -> None:
        if self._swept:
            return
        if self._pid is None:
            # Only a wrapper that failed has no pid, and it exits by itself.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._exit), CONTROL_TIMEOUT_S)
            if not self._exit.done():
                log.warning("%s has no pid to signal; destroying its box (fail closed)", self.name)
                with contextlib.suppress(Exception):
                    await self._fail_closed(f"{self.name} has no pid to signal")
            return
        args = [str(int(sig)), str(self._pid)]
        if self._exit.done():
            if sig != signal.SIGKILL:
                return
            self._swept = True  # one SIGKILL sweep of what the program left in its group
            args.append("group")
        try:
            rc = await asyncio.wait_for(self._run_control(KILLER, args), CONTROL_TIMEOUT_S)
            if rc == 0:
                return
            error = f"the signal command exited with {rc}"
        except Exception as e:  # includes the timeout
            error = repr(e)
        if self._exit.done():
            return  # nothing left to protect against
        reason = f"could not signal {self.name}: {error}"
        log.warning("%s; destroying its box (fail closed)", reason)
        with contextlib.suppress(Exception):
            await self._fail_closed(reason)
