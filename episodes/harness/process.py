"""Process plumbing that every harness driver needs, whatever it speaks on stdio.

The native driver (`session.py`) and the ACP driver (`acp.py`) differ only in what
goes over stdin/stdout; keeping the stderr tail, how an exit is described and the
stop escalation here means both end a misbehaving process the same way.
`session.py` still carries its own copy of these (it predates this module); it can
switch to these helpers without changing behaviour.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal

from episodes.harness.protocol import READ_CHUNK_BYTES
from episodes.runtimes.base import ByteStream, RuntimeProcess

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
