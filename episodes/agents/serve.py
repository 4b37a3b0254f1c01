"""The model proxy's HTTP/1.1 server: requests in, whole or streamed answers out.

Why not aiohttp's server: the proxy serves two routes to one client (its session's
harness), and at agent scale the server was a third of the proxy's CPU per call (its
request and response objects, router, middleware, payload writer: ~0.1 ms a call at
256 sessions). This one is an `asyncio.Protocol` per connection: a request is parsed
from what the socket gave (its head split once, its body kept as bytes), handed to the
handler as a `Request`, and answered with one `transport.write` (a whole answer) or
one per piece (a stream, chunked): nothing between the handler and the socket.

It keeps what a harness's HTTP client needs: keep-alive and pipelined requests (one
at a time, in order), `Content-Length` and chunked request bodies, `Expect:
100-continue`, flow control (a stream waits while the harness reads slowly), limits
(64 KiB of head, `max_body`: 431 / 413, then the connection closes), and a stop that
refuses new connections, lets requests in flight finish for a moment, then cancels
them. The harness is untrusted: a malformed request gets a 400 and the connection
closes; nothing it sends reaches a handler unless it parsed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any

log = logging.getLogger(__name__)

MAX_HEAD = 64 * 1024


_PHRASES = {s.value: s.phrase.encode() for s in HTTPStatus}


def _phrase(status: int) -> bytes:
    return _PHRASES.get(status) or b"Status"  # any status an upstream may answer


class Request:
    """One parsed request; answer it with `respond`, or `start_stream` / `send` / `end`."""

    __slots__ = ("_conn", "_keep_alive", "answered", "body", "headers", "method", "path")

    def __init__(
        self,
        conn: _Conn,
        method: str,
        path: str,
        headers: dict[str, str],
        body: bytes,
        keep_alive: bool,
    ) -> None:
        self.method, self.path, self.headers, self.body = method, path, headers, body
        self._conn = conn
        self._keep_alive = keep_alive
        self.answered = False

    @property
    def gone(self) -> bool:
        """The client hung up (what is sent from now on goes nowhere)."""
        return self._conn.closed

    def respond(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        """The whole answer, in one write."""
        self.answered = True
        head = b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n%s\r\n" % (
            status,
            _phrase(status),
            content_type.encode("latin-1"),
            len(body),
            b"" if self._keep_alive else b"Connection: close\r\n",
        )
        self._conn.write(head + body)

    def start_stream(self, content_type: bytes = b"text/event-stream") -> None:
        """A 200 whose body follows in pieces (`send`), ended by `end`."""
        self.answered = True
        self._conn.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nCache-Control: no-cache\r\n"
            b"Transfer-Encoding: chunked\r\n%s\r\n"
            % (content_type, b"" if self._keep_alive else b"Connection: close\r\n")
        )

    def send(self, data: bytes) -> bool:
        """One piece of a stream; whether the client keeps up (False: it reads slower
        than we send: wait for `on_writable` before sending more). ConnectionResetError
        once the client hung up."""
        conn = self._conn
        if conn.closed:
            raise ConnectionResetError("the client hung up")
        if data:
            conn.transport.write(b"%x\r\n%b\r\n" % (len(data), data))  # type: ignore[union-attr]
        return not conn.paused

    def on_writable(self, callback: Callable[[], Any] | None) -> None:
        """Call `callback` when the client has read enough to send again (or hung up)."""
        self._conn.on_writable = callback

    def end(self) -> None:
        if not self._conn.closed:
            self._conn.write(b"0\r\n\r\n")


Handler = Callable[[Request], Awaitable[None]]


class HttpServer:
    def __init__(self, handler: Handler, *, max_body: int) -> None:
        self._handler = handler
        self.max_body = max_body
        self._servers: list[asyncio.AbstractServer] = []
        self._conns: set[_Conn] = set()

    async def listen_tcp(self, sock: Any) -> None:
        loop = asyncio.get_running_loop()
        self._servers.append(await loop.create_server(lambda: _Conn(self), sock=sock))

    async def listen_unix(self, path: str) -> None:
        loop = asyncio.get_running_loop()
        self._servers.append(await loop.create_unix_server(lambda: _Conn(self), path=path))

    async def close(self, timeout: float) -> None:
        """Refuse new connections; requests in flight get `timeout` s, then are cancelled."""
        for server in self._servers:
            server.close()
        tasks = [c.task for c in self._conns if c.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)
        for conn in list(self._conns):
            if conn.task is not None:
                conn.task.cancel()
            conn.close()
        if tasks:
            await asyncio.wait(tasks)
        for server in self._servers:
            await server.wait_closed()


class _Conn(asyncio.Protocol):
    def __init__(self, server: HttpServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.task: asyncio.Task[None] | None = None
        self.closed = False
        self.paused = False
        self.on_writable: Callable[[], Any] | None = None
        # A request whose head is parsed and whose body is still arriving: its head,
        # and where its body ends (Content-Length) or how far its chunks are read.
        self._head: tuple[str, str, bool, dict[str, str], int] | None = None
        self._need = 0  # bytes the buffer must hold before parsing is worth trying
        self._chunks: _Dechunker | None = None
        self._continued = False  # its `100 Continue` is sent

    # -- the socket ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.server._conns.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server._conns.discard(self)
        self._wake()

    def data_received(self, data: bytes) -> None:
        # Hazard: the harness is untrusted, and a body may come in thousands of reads.
        # Each read costs what it adds: the head is parsed once, a Content-Length body
        # is waited for by its size, a chunked one is read on from where it stopped.
        seen = len(self.buf)
        self.buf += data
        if self.task is None and (
            len(self.buf) >= self._need
            or (self._head is None and b"\r\n\r\n" in self.buf[max(0, seen - 3) :])
        ):
            self._next()
        elif len(self.buf) > MAX_HEAD + self.server.max_body:
            self.transport.pause_reading()  # type: ignore[union-attr]  # pipelined too far

    def eof_received(self) -> bool | None:
        return None  # close (a half-closed client has sent all it will)

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self._wake()

    def _wake(self) -> None:
        if self.on_writable is not None:
            self.on_writable()

    def write(self, data: bytes) -> None:
        if not self.closed:
            self.transport.write(data)  # type: ignore[union-attr]

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.close()

    def _refuse(self, status: int) -> None:
        """A request we will not serve: say why, then close (the rest of it is unread)."""
        body = b'{"error": {"message": "%s", "type": "invalid_request_error", "code": null}}' % (
            _phrase(status)
        )
        self.write(
            b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
            b"Connection: close\r\n\r\n%b" % (status, _phrase(status), len(body), body)
        )
        self.buf.clear()
        self.close()

    # -- requests ------------------------------------------------------------------------

    def _next(self) -> None:
        """Start serving the next complete request in the buffer, if there is one."""
        if self.closed:
            return
        buf = self.buf
        if self._head is None:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > MAX_HEAD:
                    self._refuse(431)
                self._need = MAX_HEAD + 1  # or a blank line (data_received looks)
                return
            if end > MAX_HEAD:
                return self._refuse(431)
            try:
                method, path, keep_alive, headers = _parse_head(bytes(buf[:end]))
            except ValueError:
                return self._refuse(400)
            self._head = (method, path, keep_alive, headers, end + 4)
        method, path, keep_alive, headers, start = self._head
        if "transfer-encoding" in headers:
            if headers["transfer-encoding"].lower() != "chunked" or "content-length" in headers:
                return self._refuse(400)
            if self._chunks is None:
                self._chunks = _Dechunker(start, self.server.max_body)
            try:
                got = self._chunks.read(buf)
            except OverflowError:
                return self._refuse(413)
            except ValueError:
                return self._refuse(400)
            if got is None:
                self._need = len(buf) + 1  # any new bytes: read on from where it stopped
                return self._await_body(headers)
            body, stop = got
        else:
            length = headers.get("content-length", "0")
            if not length.isdigit():
                return self._refuse(400)
            size = int(length)
            if size > self.server.max_body:
                return self._refuse(413)
            stop = start + size
            if len(buf) < stop:
                self._need = stop
                return self._await_body(headers)
            body = bytes(buf[start:stop])
        del buf[:stop]
        self._head, self._chunks, self._need, self._continued = None, None, 0, False
        request = Request(self, method, path, headers, body, keep_alive)
        self.task = asyncio.get_running_loop().create_task(self._serve(request))

    def _await_body(self, headers: dict[str, str]) -> None:
        if headers.get("expect", "").lower() == "100-continue" and not self._continued:
            self._continued = True  # looked at again with more bytes: said once
            self.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    async def _serve(self, request: Request) -> None:
        try:
            await self.server._handler(request)
            if not request.answered:
                request.respond(500, b'{"error": {"message": "no answer"}}')
        except asyncio.CancelledError:
            self.close()
            raise
        except Exception:
            log.exception("model proxy: a request failed")
            if not request.answered:
                request.respond(500, b'{"error": {"message": "internal error"}}')
            self.close()
        finally:
            self.task = None
            self.on_writable = None
        if not request._keep_alive:
            self.close()
        elif self.buf:
            self.transport.resume_reading()  # type: ignore[union-attr]
            self._next()


def _parse_head(head: bytes) -> tuple[str, str, bool, dict[str, str]]:
    """(method, path without the query, keep-alive, headers by lower-case name)."""
    lines = head.decode("latin-1").split("\r\n")
    method, target, version = lines[0].split(" ")
    if version not in ("HTTP/1.1", "HTTP/1.0") or not target.startswith("/"):
        raise ValueError("not an HTTP/1.x request")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise ValueError("malformed header")
        name = name.lower()
        value = value.strip()
        if name in headers:
            if name in ("content-length", "transfer-encoding", "authorization", "host"):
                raise ValueError(f"{name} twice")
            value = f"{headers[name]}, {value}"
        headers[name] = value
    connection = headers.get("connection", "").lower()
    if version == "HTTP/1.0":
        keep_alive = "keep-alive" in connection
    else:
        keep_alive = "close" not in connection
    return method, target.partition("?")[0], keep_alive, headers


class _Dechunker:
    """A chunked body read as it arrives: each `read` goes on from the last whole chunk,
    so a body in many reads costs its length once, not once per read."""

    def __init__(self, start: int, limit: int) -> None:
        self.i = start  # where the next chunk's size line starts
        self.limit = limit
        self.parts: list[bytes] = []
        self.total = 0

    def read(self, buf: bytearray) -> tuple[bytes, int] | None:
        """(body, where it ends), or None if not all in yet. OverflowError past the
        limit, ValueError if malformed."""
        while True:
            i = self.i
            end = buf.find(b"\r\n", i, i + 1026)
            if end < 0:
                if len(buf) - i > 1024:
                    raise ValueError("chunk size line too long")
                return None
            size = int(bytes(buf[i:end]).split(b";", 1)[0].strip(), 16)  # ValueError
            if size < 0:
                raise ValueError("negative chunk size")
            if size == 0:
                trailers = buf.find(b"\r\n\r\n", end)
                if trailers < 0:
                    if len(buf) - end > MAX_HEAD:
                        raise ValueError("trailers too long")
                    return None
                return b"".join(self.parts), trailers + 4
            if self.total + size > self.limit:
                raise OverflowError("body too large")
            stop = end + 2 + size
            if len(buf) < stop + 2:
                return None
            if buf[stop : stop + 2] != b"\r\n":
                raise ValueError("chunk not followed by CRLF")
            self.parts.append(bytes(buf[end + 2 : stop]))
            self.total += size
            self.i = stop + 2
