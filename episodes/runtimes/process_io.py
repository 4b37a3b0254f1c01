"""What every boxed process shares: buffered output streams and the exit-code convention.

A box's process output arrives in chunks from somewhere (a Docker socket demultiplexed
by a thread, an SDK's async iterator); `BufferedStream` turns that into the interface's
`ByteStream`, with a bounded backlog so a process nobody reads blocks like on a full
pipe instead of filling the worker's memory. How the producer is held back differs
(a thread waits on a condition, a task on an event), so that is the `_consumed` hook.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from episodes.runtimes.base import RuntimeProcess

log = logging.getLogger(__name__)

# Per stream: past this many unread bytes the producer stops pulling, like a full pipe
# blocks the writer. Bounded memory, whatever the process prints.
HIGH_WATER = 4 * 1024 * 1024
_CHUNK = 64 * 1024


def exit_code(raw: int) -> int:
    """A shell (and Docker, and Modal) reports a signalled process as 128+n; the interface
    says -n. A program's own `exit 143` is indistinguishable and reads as -15 too."""
    return -(raw - 128) if 128 < raw <= 128 + 64 else raw


class BufferedStream:
    """A ByteStream fed on the event loop (`feed`, `feed_eof`) and read by tasks.

    Reads are cancellation-safe: a timed-out read loses nothing. With `header`, the
    first line is taken off the stream into the `header` future (a wrapper's pid
    report); if the stream ends before a full line, `header` is None and what came
    stays readable (it is the wrapper's own complaint).
    """

    def __init__(self, name: str, *, header: bool = False) -> None:
        self.name = name
        self.header: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()
        if not header:
            self.header.set_result(None)
        self._head = bytearray()
        self._buf = bytearray()
        self._eof = False
        self._data = asyncio.Event()

    def _consumed(self, n: int) -> None:
        """`n` fed bytes left the buffer: a producer held back may go on."""

    def feed(self, data: bytes) -> None:
        if not self.header.done():
            self._head += data
            line, sep, rest = bytes(self._head).partition(b"\n")
            if not sep:
                return
            self._head.clear()
            self.header.set_result(line)
            self._consumed(len(line) + 1)
            data = rest
        if data:
            self._buf += data
            self._data.set()

    def feed_eof(self) -> None:
        if not self.header.done():
            self.header.set_result(None)
            self.unread(bytes(self._head))
            self._head.clear()
        self._eof = True
        self._data.set()

    def unread(self, data: bytes) -> None:
        """Put `data` back in front (a header line that turned out not to be one)."""
        self._buf[:0] = data
        self._data.set()

    @property
    def buffered(self) -> int:
        return len(self._buf)

    async def read(self, n: int = -1) -> bytes:
        if n == 0:
            return b""
        if n < 0:  # to EOF, emptying the buffer as it goes so the producer keeps moving
            parts = []
            while chunk := await self.read(max(len(self._buf), _CHUNK)):
                parts.append(chunk)
            return b"".join(parts)
        while not self._buf and not self._eof:
            self._data.clear()
            await self._data.wait()
        data = bytes(self._buf[:n])
        del self._buf[:n]
        if data:
            self._consumed(len(data))
        return data


class PumpedStream(BufferedStream):
    """A BufferedStream fed by a background task from an SDK's async chunk iterator.

    The task, not the reader, pulls from the SDK: cancelling an SDK generator in the
    middle of `__anext__` (a timed-out read) could lose a chunk. A failing source
    ends the stream (EOF); the error is kept in `error` and logged, and the process's
    `wait()` reports how it ended.
    """

    def __init__(self, source: AsyncIterator[bytes], name: str, *, header: bool = False):
        super().__init__(name, header=header)
        self.error: BaseException | None = None
        self._space = asyncio.Event()
        self._space.set()
        self._task = asyncio.ensure_future(self._pump(source))

    def _consumed(self, n: int) -> None:
        if len(self._buf) < HIGH_WATER:
            self._space.set()

    async def _pump(self, source: AsyncIterator[bytes]) -> None:
        try:
            async for chunk in source:
                if not chunk:
                    continue
                self.feed(chunk)
                if len(self._buf) >= HIGH_WATER:
                    self._space.clear()
                    await self._space.wait()
        except Exception as e:
            self.error = e
            log.warning("%s stream failed, treating it as closed: %s", self.name, e)
        finally:
            self.feed_eof()

    def close(self) -> None:
        """Stop pulling; what is buffered stays readable, then EOF."""
        self._task.cancel()


class StreamedProcess(RuntimeProcess):
    """A boxed process whose output are two BufferedStreams and whose exit is a future.

    `_pid` is what the process's wrapper reported (its stderr header line), and
    `_set_exit` is called once by whatever learns how it ended.
    """

    def __init__(self, stdout: BufferedStream, stderr: BufferedStream) -> None:
        self._out = stdout
        self._err = stderr
        self._pid: int | None = None
        self._exit: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    @property
    def stdout(self) -> BufferedStream:
        return self._out

    @property
    def stderr(self) -> BufferedStream:
        return self._err

    @property
    def pid(self) -> int | None:
        return self._pid

    @property
    def returncode(self) -> int | None:
        return self._exit.result() if self._exit.done() else None

    def _set_exit(self, code: int) -> int:
        if not self._exit.done():
            self._exit.set_result(code)
        return self._exit.result()
