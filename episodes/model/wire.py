"""The bytes of one upstream connection (HTTP/1.1), for `episodes/model/upstream.py`.

`Wire` is the connection's protocol: what arrives is kept until a read takes it or,
while a streamed answer is forwarded, handed to a sink as it arrives (from the event
loop's read callback: no task, await or timer per read). `Framing` says which of those
bytes are the body (Content-Length, chunked, or until the connection closes).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


async def _within(waiter: asyncio.Future[None], timeout: float) -> None:
    """Await `waiter`, a future the protocol's callbacks resolve; TimeoutError (by
    `_expire`) after `timeout` s."""
    timer = asyncio.get_running_loop().call_later(timeout, _expire, waiter)
    try:
        await waiter
    finally:
        timer.cancel()


class Wire(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: Any = None
        self.buf = bytearray()
        self.eof = False
        self.error: Exception | None = None
        # While forwarding: each read goes to `sink`; the end (EOF, a reset) to `on_end`.
        self.sink: Callable[[bytes], None] | None = None
        self.on_end: Callable[[], None] | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._paused = False
        self._drained: asyncio.Future[None] | None = None

    # -- the loop's callbacks ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.sink is not None:
            self.sink(data)
            return
        self.buf += data
        self._wake()

    def eof_received(self) -> bool | None:
        self.eof = True
        self._end()
        return False  # close the transport (we never write after the server is done)

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = True
        if exc is not None and self.error is None:
            self.error = exc
        self._end()
        self._paused = False
        drained, self._drained = self._drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        drained, self._drained = self._drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    def _end(self) -> None:
        if self.on_end is not None:
            self.on_end()
        self._wake()

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- reads and writes ----------------------------------------------------------------

    @property
    def alive(self) -> bool:
        return not self.eof and not self.transport.is_closing()

    async def _wait(self, timeout: float) -> None:
        """Until more bytes, the end, or `timeout` s (TimeoutError)."""
        self._waiter = waiter = asyncio.get_running_loop().create_future()
        await _within(waiter, timeout)

    def take(self) -> bytes:
        """What is buffered (maybe nothing), without waiting."""
        data = bytes(self.buf)
        self.buf.clear()
        return data

    async def read(self, timeout: float) -> bytes:
        """What is buffered, else the next bytes to arrive; b"" at the end. The error
        that ended the connection, if one did and nothing is left."""
        while not self.buf:
            if self.eof:
                if self.error is not None:
                    raise self.error
                return b""
            await self._wait(timeout)
        return self.take()

    async def readuntil(self, sep: bytes, limit: int, timeout: float) -> bytes:
        """Up to and with `sep`. IncompleteReadError at the end, LimitOverrunError past
        `limit`."""
        start = 0
        while True:
            at = self.buf.find(sep, start)
            if at >= 0:
                end = at + len(sep)
                data = bytes(self.buf[:end])
                del self.buf[:end]
                return data
            if len(self.buf) > limit:
                raise asyncio.LimitOverrunError("head too long", len(self.buf))
            if self.eof:
                if self.error is not None and not self.buf:
                    raise self.error
                raise asyncio.IncompleteReadError(bytes(self.buf), None)
            start = max(0, len(self.buf) - len(sep) + 1)
            await self._wait(timeout)

    def write(self, data: bytes) -> None:
        self.transport.write(data)

    async def drain(self, timeout: float) -> None:
        if self.eof and self.error is not None:
            raise self.error
        if not self._paused:
            return
        self._drained = waiter = asyncio.get_running_loop().create_future()
        await _within(waiter, timeout)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class Framing:
    """Which bytes of a connection are an answer's body: `feed` gives the body's part of
    what arrived; `done` once all of it did; `extra` if more came than the body (the
    connection is not to be reused)."""

    def __init__(self, status: int, headers: dict[str, str]) -> None:
        self.done = False
        self.extra = False
        self.until_close = False
        self._left = -1
        self._dechunk: Dechunker | None = None
        if status in (204, 304) or 100 <= status < 200:
            self.done = True
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            self._dechunk = Dechunker()
        elif "content-length" in headers:
            length = headers["content-length"]
            if not (length.isascii() and length.isdigit()):  # int() takes "+5", "5_0", "²"
                raise ValueError("Content-Length is not a number")
            self._left = int(length)
            self.done = self._left == 0
        else:
            self.until_close = True  # the body ends with the connection

    def feed(self, raw: bytes) -> bytes:
        if self._dechunk is not None:
            # Decoded per network read, not per HTTP chunk: a stream of small chunks
            # costs one pass (and one write downstream) per read, however many it held.
            data = self._dechunk.feed(raw)
            self.done, self.extra = self._dechunk.done, self._dechunk.extra
            return data
        if self._left >= 0:
            if len(raw) >= self._left:
                raw, self.extra = raw[: self._left], len(raw) > self._left
                self._left, self.done = 0, True
            else:
                self._left -= len(raw)
        return raw


class Dechunker:
    """Incremental `Transfer-Encoding: chunked` decoding (RFC 9112 7.1), whole chunks at
    a time: a chunk's data is passed on once all of it is in (an SSE chunk is one event,
    of no use to the harness in part), so a read costs a few C calls per chunk."""

    def __init__(self) -> None:
        self._buf = b""
        self.done = False
        self.extra = False

    def feed(self, data: bytes) -> bytes:
        if not self._buf:  # the usual read of a stream: exactly one whole chunk
            end = data.find(b"\r\n")
            if 0 < end < len(data) - 4 and data.endswith(b"\r\n"):
                line = data[:end]
                if b";" not in line:
                    size = _size(line)  # ValueError: malformed, as below
                    if 0 < size == len(data) - end - 4:
                        return data[end + 2 : -2]
        buf = self._buf + data if self._buf else data
        out: list[bytes] = []
        i, n = 0, len(buf)
        while True:
            end = buf.find(b"\r\n", i)
            if end < 0:
                if n - i > 1024:
                    raise ValueError("chunk size line too long")
                break
            line = buf[i:end]
            size = _size(line.split(b";", 1)[0].rstrip(b" \t") if b";" in line else line)
            if size == 0:
                if buf.startswith(b"\r\n", end + 2):
                    stop = end + 4  # no trailers
                else:
                    trailers = buf.find(b"\r\n\r\n", end)
                    if trailers < 0:
                        break
                    stop = trailers + 4
                self.done, self.extra, i = True, stop < n, stop
                break
            start = end + 2
            stop = start + size
            if stop + 2 > n:
                break
            if buf[stop : stop + 2] != b"\r\n":
                raise ValueError("chunk not followed by CRLF")
            out.append(buf[start:stop])
            i = stop + 2
        self._buf = b"" if self.done else buf[i:]
        return out[0] if len(out) == 1 else b"".join(out)


def _size(line: bytes) -> int:
    """A chunk size: hex digits only (int(x, 16) also takes "0x2", "-0", "+2", "2_0")."""
    if not line or len(line) > 16 or line.strip(b"0123456789abcdefABCDEF"):
        raise ValueError("malformed chunk size")
    return int(line, 16)


def parse_head(raw: bytes) -> tuple[int, dict[str, str]]:
    lines = raw.decode("latin-1").split("\r\n")
    version, status, *_ = lines[0].split(" ", 2)
    if not version.startswith("HTTP/1."):
        raise ValueError(f"not HTTP/1.x: {lines[0][:40]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    if version == "HTTP/1.0" and "connection" not in headers:
        headers["connection"] = "close"
    return int(status), headers
