"""The model proxy's HTTP/1.1 server: requests in, whole or streamed answers out.

Why not aiohttp's server: the proxy serves two routes to one client (its session's
harness), and at agent scale the server was a third of the proxy's CPU per call (its
request and response objects, router, middleware, payload writer: ~0.1 ms a call at
256 sessions). This one is an `asyncio.Protocol` per connection: the bytes go through
llhttp (`httptools`, the parser uvicorn uses: a maintained one, not a hand-written one),
a request is handed to the handler as a `Request`, and answered with one
`transport.write` (a whole answer) or one per piece (a stream, chunked).

It keeps what a harness's HTTP client needs: keep-alive and pipelined requests (one at
a time, in order), `Content-Length` and chunked request bodies, `Expect: 100-continue`,
flow control (a stream waits while the harness reads slowly), and a stop that refuses
new connections, lets requests in flight finish for a moment, then cancels them.

The harness is untrusted, so every resource it can make the server hold is bounded
(`Bounds`): a request's head is judged (`admit`: the token, the session's budgets)
before a byte of its body is read; a head is at most 64 KiB (431), a body `max_body`
(413); the bodies the session's connections hold at once are at most `held_bytes`
(429); it may hold at most `connections` open (the rest are answered 429 and closed);
a connection idle for `idle_s`, or a request whose head and body take longer than
`request_s` to arrive, is closed. A malformed request gets a 400 and the connection
closes; nothing it sends reaches a handler unless it parsed.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import httptools

__all__ = ["Admit", "Bounds", "Handler", "HttpServer", "Refusal", "Request"]

log = logging.getLogger(__name__)

MAX_HEAD = 64 * 1024

_PHRASES = {s.value: s.phrase.encode() for s in HTTPStatus}


def _phrase(status: int) -> bytes:
    return _PHRASES.get(status) or b"Status"  # any status an upstream may answer


@dataclass(frozen=True)
class Bounds:
    """What one server (one session's endpoint) lets its clients hold."""

    max_body: int
    connections: int = 64
    held_bytes: int = 128 * 1024 * 1024
    idle_s: float = 60.0
    request_s: float = 30.0


class Refusal(Exception):
    """What `admit` answers to a request it will not serve: its status and message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


# `admit(method, path, headers)` runs on the head, before the body is read: it raises
# Refusal (answered at once, the connection closed) or returns.
Admit = Callable[[str, str, dict[str, str]], None]


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

    def close(self) -> None:
        """Hang up on the client (what it has not read is dropped)."""
        conn = self._conn
        if conn.transport is not None and not conn.closed:
            conn.transport.abort()

    def end(self) -> None:
        if not self._conn.closed:
            self._conn.write(b"0\r\n\r\n")


Handler = Callable[[Request], Awaitable[None]]


class HttpServer:
    def __init__(
        self,
        handler: Handler,
        *,
        max_body: int | None = None,
        bounds: Bounds | None = None,
        admit: Admit | None = None,
    ) -> None:
        if bounds is None:
            assert max_body is not None, "max_body or bounds"
            bounds = Bounds(max_body=max_body)
        self._handler = handler
        self.bounds = bounds
        self.admit = admit
        self.held = 0  # body bytes the connections hold (arriving, queued or served)
        self._servers: list[asyncio.AbstractServer] = []
        self._conns: set[_Conn] = set()
        # Every request being served, its connection open or not (a lost one leaves
        # `_conns` while its request runs on): `close` ends them all.
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def max_body(self) -> int:
        return self.bounds.max_body

    @property
    def connections(self) -> int:
        return len(self._conns)

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
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout)
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for conn in list(self._conns):
            conn.close()
        if tasks:
            await asyncio.wait(tasks)
        for server in self._servers:
            await server.wait_closed()


class _Conn(asyncio.Protocol):
    def __init__(self, server: HttpServer) -> None:
        self.server = server
        self.bounds = server.bounds
        self.transport: asyncio.Transport | None = None
        self.task: asyncio.Task[None] | None = None
        self.closed = False
        self.paused = False
        self.on_writable: Callable[[], Any] | None = None
        self._parser = httptools.HttpRequestParser(self)
        self._queue: collections.deque[Request] = collections.deque()  # parsed, not served
        self._held = 0  # body bytes this connection holds (counted in server.held)
        self._reading = True
        self._loop = asyncio.get_running_loop()
        # One timer per connection, moved on lazily (a request only notes its deadline).
        self._deadline: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        # The request being parsed.
        self._url = b""
        self._headers: dict[str, str] = {}
        self._head_bytes = 0  # of the head's parts llhttp handed over
        self._head_raw = 0  # of the reads that held only (part of) the head
        self._body: list[bytes] = []
        self._size = 0
        self._refused = False
        self._in_head = True  # no request, or one whose head is not all in
        self._ended = 0  # requests parsed whole

    # -- the socket ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if len(self.server._conns) >= self.bounds.connections:
            # Past the session's bound: said, not served (its neighbours are not touched).
            return self._refuse(
                429, b"too many open connections for this session (harness.limits.connections)"
            )
        self.server._conns.add(self)
        self._expect(self.bounds.idle_s)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server._conns.discard(self)
        self._release(self._held)
        self._queue.clear()
        self._body = []
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._wake()

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        ended = self._ended
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserCallbackError as e:
            refusal = e.__context__
            if isinstance(refusal, Refusal):
                self._refuse(refusal.status, refusal.message.encode())
            else:  # our bug, not the harness's: it still gets an answer
                log.error("model proxy: parsing a request failed", exc_info=refusal)
                self._refuse(500, b"internal error")
        except httptools.HttpParserUpgrade:
            self._refuse(400, b"protocol upgrades are not served")
        except httptools.HttpParserError:
            self._refuse(400, b"malformed request")
        else:
            if self._in_head and ended == self._ended:
                # llhttp hands a header over once it is whole: a head that never ends is
                # counted here (reads that ended no request hold only this head's bytes).
                self._head_raw += len(data)
                if self._head_raw > MAX_HEAD:
                    return self._refuse(431, b"request head too large")
            if self.task is None and self._queue:
                self._serve_next()

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

    def _refuse(self, status: int, message: bytes) -> None:
        """A request we will not serve: say why, then close (the rest of it is unread)."""
        self._refused = True
        text = message.replace(b"\\", b"\\\\").replace(b'"', b'\\"')
        body = b'{"error": {"message": "%s", "type": "invalid_request_error", "code": "%d"}}' % (
            text,
            status,
        )
        self.write(
            b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
            b"Connection: close\r\n\r\n%b" % (status, _phrase(status), len(body), body)
        )
        self.close()

    # -- time ----------------------------------------------------------------------------

    def _expect(self, within: float | None) -> None:
        """The client must send (the next request, the rest of this one) within `within`
        s; None: nothing is expected of it (a request is being served)."""
        if within is None:
            self._deadline = None
            return
        self._deadline = due = self._loop.time() + within
        timer = self._timer
        if timer is not None and timer.when() > due:
            timer.cancel()
            timer = None
        if timer is None:
            self._timer = self._loop.call_at(due, self._check)

    def _check(self) -> None:
        self._timer = None
        due = self._deadline
        if due is None or self.closed:
            return
        if self._loop.time() < due:
            self._timer = self._loop.call_at(due, self._check)
        elif self._url or self._headers or self._size:
            self._refuse(408, b"the request took too long to arrive")
        else:
            self.close()  # idle: nothing to say

    # -- the parser's callbacks (llhttp) -------------------------------------------------

    def on_message_begin(self) -> None:
        self._url, self._headers, self._head_bytes, self._head_raw = b"", {}, 0, 0
        self._in_head = True
        self._body, self._size = [], 0
        if self.task is None and not self._queue:
            self._expect(self.bounds.request_s)

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._head_bytes += len(url)
        if self._head_bytes > MAX_HEAD:
            raise Refusal(431, "request head too large")

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_bytes += len(name) + len(value) + 4
        if self._head_bytes > MAX_HEAD:
            raise Refusal(431, "request head too large")
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1").strip()
        headers = self._headers
        if key in headers:
            if key in ("content-length", "transfer-encoding", "authorization", "host"):
                raise Refusal(400, f"{key} twice")
            text = f"{headers[key]}, {text}"
        headers[key] = text

    def on_headers_complete(self) -> None:
        self._in_head = False
        parser, headers = self._parser, self._headers
        if parser.get_http_version() not in ("1.1", "1.0"):
            raise Refusal(400, "not an HTTP/1.x request")
        if not self._url.startswith(b"/"):
            raise Refusal(400, "malformed request target")
        method = parser.get_method().decode("latin-1")
        path = self._url.decode("latin-1").partition("?")[0]
        if self.server.admit is not None:
            self.server.admit(method, path, headers)  # Refusal: before any of the body
        length = headers.get("content-length")
        if length is not None:  # llhttp took only digits; it checks the body against it
            self._take(int(length))
        if headers.get("expect", "").lower() == "100-continue" and length != "0":
            self.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        if "content-length" not in self._headers:
            self._take(len(body))  # chunked: charged as it arrives
        self._body.append(body)

    def on_message_complete(self) -> None:
        self._in_head = True
        self._ended += 1
        parser = self._parser
        parts, self._body = self._body, []
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        method = parser.get_method().decode("latin-1")
        path = self._url.decode("latin-1").partition("?")[0]
        request = Request(self, method, path, self._headers, body, parser.should_keep_alive())
        self._url, self._headers, self._size = b"", {}, 0
        self._queue.append(request)
        if self.task is not None and self._reading:
            self._reading = False  # pipelined ahead: read on once this one is served
            self.transport.pause_reading()  # type: ignore[union-attr]

    def _take(self, n: int) -> None:
        """Count `n` more bytes of the body being read against the bounds."""
        self._size += n
        if self._size > self.bounds.max_body:
            raise Refusal(413, "request body too large")
        if self.server.held + n > self.bounds.held_bytes:
            raise Refusal(429, "the session's connections hold too many request bytes; retry later")
        self.server.held += n
        self._held += n

    def _release(self, n: int) -> None:
        n = min(n, self._held)
        self._held -= n
        self.server.held -= n

    # -- requests ------------------------------------------------------------------------

    def _serve_next(self) -> None:
        request = self._queue.popleft()
        self._expect(None)
        self.task = task = self._loop.create_task(self._serve(request))
        self.server._tasks.add(task)
        task.add_done_callback(self.server._tasks.discard)

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
            self._release(len(request.body))
        if not request._keep_alive:
            self.close()
        elif self.closed:
            return
        elif self._queue:
            self._serve_next()
        else:
            self._expect(
                self.bounds.request_s if self._url or self._headers else self.bounds.idle_s
            )
            if not self._reading:
                self._reading = True
                self.transport.resume_reading()  # type: ignore[union-attr]
