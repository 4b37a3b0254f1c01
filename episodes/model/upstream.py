"""The model proxy's HTTP/1.1 client for its upstream: POST a body, read or stream the answer.

Why not aiohttp's or httpx's client: the proxy makes one kind of request (a JSON POST
to one URL per spec) and reads one kind of answer (a JSON body, or server-sent events),
and at agent scale the client was most of the proxy's CPU: aiohttp's ~150-190 us per
call (its request and response objects, cookie and redirect handling, tracing hooks),
httpx's more; this one ~55-85 us (measured side by side: bench/README.md, issue 22).
It keeps what that kind of call needs: keep-alive connections pooled per worker loop
(shared by every session; the session's headers go with each request), TLS with the
process's CA context, Content-Length and chunked bodies, gzip/deflate if an upstream
compresses anyway, per-read timeouts (a stream may last long while chunks keep
coming), and one retry on a fresh connection when a pooled one turns out closed
before any answer (the server dropped it while idle: nothing was processed).

An upstream reached through an HTTP(S)_PROXY of the environment goes through aiohttp
instead (`AiohttpUpstream`, episodes/model/upstream_aiohttp.py), which speaks to
proxies; same interface.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ssl
import zlib
from collections.abc import AsyncIterator, Callable
from urllib.parse import urlsplit

from episodes.model.wire import Framing, Wire, parse_head

MAX_HEADER_BYTES = 64 * 1024


class UpstreamError(Exception):
    """The upstream could not be reached or broke the protocol; `kind` names how
    (the names httpx used before: ConnectError, ReadError, RemoteProtocolError)."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


class SlowReader(Exception):
    """A forwarded body waited on its reader (`pause()`d) longer than its timeout, in
    all: the upstream connection is not held for a reader that does not read."""


class Response:
    """An answer's status and headers; its body read whole, streamed or forwarded, once."""

    def __init__(self, conn: _Conn | None, status: int, headers: dict[str, str]) -> None:
        self.status = status
        self.headers = headers  # names in lower case
        self._conn = conn
        self._done = False
        self._framing = Framing(status, headers)  # ValueError: a bad Content-Length
        encoding = headers.get("content-encoding", "").lower()
        wbits = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}.get(encoding)
        self._inflate = zlib.decompressobj(wbits) if wbits else None
        self._forwarding: _Forward | None = None

    async def read(self, timeout: float) -> bytes:
        conn, framing = self._conn, self._framing
        if conn is not None and not self._done and conn.wire.buf and not self._inflate:
            # Usually the whole body came with the head: taken without an await.
            try:
                data = framing.feed(conn.wire.take())
            except ValueError as e:
                raise _read_error(e) from None
            if framing.done:
                self._done = True
                return data
            parts = [data]
        else:
            parts = []
        parts += [p async for p in self.iter_any(timeout)]
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def iter_any(self, timeout: float) -> AsyncIterator[bytes]:
        """The body's bytes as they arrive (each read within `timeout` s)."""
        conn = self._conn
        assert conn is not None and not self._done, "a body is read once"
        wire, framing = conn.wire, self._framing
        try:
            while not framing.done:
                raw = await wire.read(timeout)
                if not raw:
                    if framing.until_close:
                        break
                    raise asyncio.IncompleteReadError(b"", None)
                data = self._decoded(framing.feed(raw))
                if data:
                    yield data
        except TimeoutError:  # an OSError too: not a ReadError
            raise
        except (asyncio.IncompleteReadError, ValueError, OSError, zlib.error) as e:
            raise _read_error(e) from None
        self._done = True

    async def forward(self, sink: Callable[[bytes], None], timeout: float) -> None:
        """Hand the body's bytes to `sink` as they arrive, from the connection's own read
        callback (no task, await or timer per read); return when the body ended or
        `stop()` was called. TimeoutError when nothing came for `timeout` s (not while
        `pause()`d), SlowReader when it was `pause()`d for `timeout` s in all (the reader
        holds the upstream no longer than the upstream may stall), UpstreamError when the
        connection broke."""
        conn = self._conn
        assert conn is not None and not self._done, "a body is read once"
        self._forwarding = fwd = _Forward(self, conn.wire, sink, timeout)
        try:
            await fwd.run()
        finally:
            self._forwarding = None

    def pause(self) -> None:
        """Stop reading the upstream (the one `forward` feeds cannot keep up)."""
        if self._forwarding is not None:
            self._forwarding.pause()

    def resume(self) -> None:
        if self._forwarding is not None:
            self._forwarding.resume()

    def stop(self) -> None:
        """End `forward` now (the rest of the body is not read: the connection closes)."""
        if self._forwarding is not None:
            self._forwarding.finish(None)

    def _decoded(self, data: bytes) -> bytes:
        return self._inflate.decompress(data) if self._inflate and data else data

    def close(self) -> None:
        """Give the connection back when the body was read whole and it may be reused."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        framing = self._framing
        if self._done and not (framing.extra or framing.until_close) and _reusable(self.headers):
            conn.pool.put(conn)
        else:
            conn.close()


def _read_error(e: BaseException) -> UpstreamError:
    return UpstreamError("ReadError" if isinstance(e, OSError) else "RemoteProtocolError")


class _Forward:
    """One body forwarded from a connection's read callback (see `Response.forward`)."""

    def __init__(
        self, resp: Response, wire: Wire, sink: Callable[[bytes], None], timeout: float
    ) -> None:
        self.resp, self.wire, self.sink, self.timeout = resp, wire, sink, timeout
        self.loop = asyncio.get_running_loop()
        self.done: asyncio.Future[None] = self.loop.create_future()
        self.finished = False
        self.framing, self.inflate = resp._framing, resp._inflate
        self.last = self.loop.time()
        self.paused = False
        self.paused_at = 0.0
        self.waited = 0.0  # seconds paused for the reader, in all
        # One timer for the whole body, moved on lazily: a read only notes its time.
        self.timer: asyncio.TimerHandle | None = self.loop.call_at(self.last + timeout, self._check)

    async def run(self) -> None:
        wire = self.wire
        pending = bytes(wire.buf)
        wire.buf.clear()
        wire.sink, wire.on_end = self.feed, self._ended
        try:
            if pending:
                self.feed(pending)
            if wire.eof:
                self._ended()
            await self.done
        finally:
            wire.sink = wire.on_end = None
            if self.timer is not None:
                self.timer.cancel()
            if self.paused and not wire.eof:
                wire.transport.resume_reading()

    def feed(self, raw: bytes) -> None:
        if self.finished:
            return
        self.last = self.loop.time()
        framing = self.framing
        try:
            data = framing.feed(raw)
            if self.inflate is not None and data:
                data = self.inflate.decompress(data)
        except (ValueError, zlib.error) as e:
            return self.finish(_read_error(e))
        if data:
            self.sink(data)
        if framing.done:
            self.resp._done = True
            self.finish(None)

    def _ended(self) -> None:
        if self.finished:
            return
        if self.resp._framing.until_close and self.wire.error is None:
            self.resp._done = True
            return self.finish(None)
        self.finish(_read_error(self.wire.error or asyncio.IncompleteReadError(b"", None)))

    def _check(self) -> None:
        self.timer = None
        if self.finished:
            return
        if self.paused:
            due = self.paused_at + self.timeout - self.waited
            if self.loop.time() >= due:
                self.finish(SlowReader())
            else:
                self.timer = self.loop.call_at(due, self._check)
            return
        due = self.last + self.timeout
        if self.loop.time() >= due:
            self.finish(TimeoutError())
        else:
            self.timer = self.loop.call_at(due, self._check)

    def finish(self, error: BaseException | None) -> None:
        if self.finished:
            return
        self.finished = True
        if error is None:
            self.done.set_result(None)
        else:
            self.done.set_exception(error)

    def pause(self) -> None:
        if not self.paused and not self.finished:
            self.paused = True
            self.paused_at = self.loop.time()
            self.wire.transport.pause_reading()
            if self.timer is None:
                self.timer = self.loop.call_at(
                    self.paused_at + self.timeout - self.waited, self._check
                )

    def resume(self) -> None:
        if self.paused and not self.finished:
            self.paused = False
            self.last = self.loop.time()  # the upstream's time starts again now
            self.waited += self.last - self.paused_at
            self.wire.transport.resume_reading()
            if self.timer is None:
                self.timer = self.loop.call_at(self.last + self.timeout, self._check)


class _Conn:
    def __init__(self, pool: _Pool, wire: Wire) -> None:
        self.pool, self.wire = pool, wire

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.wire.close()

    @property
    def alive(self) -> bool:
        return self.wire.alive


class _Pool:
    def __init__(self) -> None:
        self.idle: list[_Conn] = []

    def put(self, conn: _Conn) -> None:
        self.idle.append(conn)

    def take(self) -> _Conn | None:
        while self.idle:
            conn = self.idle.pop()
            if conn.alive:
                return conn
            conn.close()
        return None


class Upstream:
    """Keep-alive connections to upstreams, shared by the sessions of one event loop."""

    def __init__(self, tls: ssl.SSLContext) -> None:
        self._tls = tls
        self._pools: dict[tuple[str, str, int], _Pool] = {}
        self.closed = False

    async def post(
        self, url: str, body: bytes, headers: dict[str, str], timeout: float
    ) -> Response:
        """Send; the answer once its status and headers are in (the body is yours to read,
        then `close()` it)."""
        scheme, host, port, prefix = _prepared(url, tuple(headers.items()))
        head = prefix + b"Content-Length: %d\r\n\r\n" % len(body)
        pool = self._pools.get((scheme, host, port))
        if pool is None:
            pool = self._pools[scheme, host, port] = _Pool()
        conn = pool.take()
        if conn is not None:
            try:
                return await self._exchange(conn, head, body, timeout)
            except UpstreamError as e:
                if e.kind != "Stale":
                    raise
        conn = await self._connect(pool, host, port, scheme == "https", timeout)
        try:
            return await self._exchange(conn, head, body, timeout)
        except UpstreamError as e:
            raise UpstreamError("RemoteProtocolError") if e.kind == "Stale" else e from None

    async def _connect(
        self, pool: _Pool, host: str, port: int, https: bool, timeout: float
    ) -> _Conn:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                _, wire = await loop.create_connection(
                    Wire,
                    host,
                    port,
                    ssl=self._tls if https else None,
                    server_hostname=host if https else None,
                )
        except TimeoutError:
            raise
        except (OSError, ssl.SSLError):
            raise UpstreamError("ConnectError") from None
        # TCP_NODELAY: asyncio sets it on every TCP transport.
        return _Conn(pool, wire)

    async def _exchange(self, conn: _Conn, head: bytes, body: bytes, timeout: float) -> Response:
        """Write the request, read the status and headers. A pooled connection closed
        before any byte of an answer raises UpstreamError("Stale") (safe to resend)."""
        got_any = False
        wire = conn.wire
        try:
            wire.write(head + body if len(body) < 65536 else head)
            if len(body) >= 65536:
                wire.write(body)
            await wire.drain(timeout)
            while True:
                try:
                    raw = await wire.readuntil(b"\r\n\r\n", MAX_HEADER_BYTES, timeout)
                except asyncio.IncompleteReadError as e:
                    got_any = got_any or bool(e.partial)
                    raise
                got_any = True
                status, headers = parse_head(raw)
                if status >= 200 or status == 101:
                    break  # 1xx (100 Continue, 103 Early Hints) come before the answer
            return Response(conn, status, headers)
        except TimeoutError:
            conn.close()
            raise
        except (asyncio.IncompleteReadError, ConnectionError):
            conn.close()
            raise UpstreamError("RemoteProtocolError" if got_any else "Stale") from None
        except (asyncio.LimitOverrunError, ValueError, OSError):
            conn.close()
            raise UpstreamError("RemoteProtocolError") from None

    async def close(self) -> None:
        self.closed = True
        for pool in self._pools.values():
            for conn in pool.idle:
                conn.close()
            pool.idle.clear()


@functools.lru_cache(maxsize=1024)
def _prepared(url: str, headers: tuple[tuple[str, str], ...]) -> tuple[str, str, int, bytes]:
    """(scheme, host, port, the request's head but its Content-Length) for a URL and
    headers: built once per session (its headers are its own), not once per call."""
    parts = urlsplit(url)
    https = parts.scheme == "https"
    host = parts.hostname or "localhost"
    port = parts.port or (443 if https else 80)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    default = (https and port == 443) or (not https and port == 80)
    lines = [
        f"POST {target} HTTP/1.1",
        f"Host: {host if default else f'{host}:{port}'}",
        "Accept-Encoding: identity",
    ]
    lines += [f"{k}: {v}" for k, v in headers]
    return parts.scheme, host, port, ("\r\n".join(lines) + "\r\n").encode("latin-1")


def _reusable(headers: dict[str, str]) -> bool:
    return "close" not in headers.get("connection", "").lower()
