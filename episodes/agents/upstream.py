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
instead (`AiohttpUpstream`), which speaks to proxies; same interface.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import zlib
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import aiohttp

MAX_HEADER_BYTES = 64 * 1024
_READ = 256 * 1024


class UpstreamError(Exception):
    """The upstream could not be reached or broke the protocol; `kind` names how
    (the names httpx used before: ConnectError, ReadError, RemoteProtocolError)."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


class Response:
    """An answer's status and headers; its body read whole or streamed, once."""

    def __init__(self, conn: _Conn | None, status: int, headers: dict[str, str]) -> None:
        self.status = status
        self.headers = headers  # names in lower case
        self._conn = conn
        self._done = False
        encoding = headers.get("content-encoding", "").lower()
        wbits = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}.get(encoding)
        self._inflate = zlib.decompressobj(wbits) if wbits else None

    async def read(self, timeout: float) -> bytes:
        parts = [p async for p in self.iter_any(timeout)]
        return b"".join(parts)

    async def iter_any(self, timeout: float) -> AsyncIterator[bytes]:
        """The body's bytes as they arrive (each read within `timeout` s)."""
        conn = self._conn
        assert conn is not None and not self._done, "a body is read once"
        try:
            async for raw in _body(conn.reader, self.status, self.headers, timeout):
                data = self._inflate.decompress(raw) if self._inflate else raw
                if data:
                    yield data
        except TimeoutError:  # an OSError too: not a ReadError
            raise
        except (asyncio.IncompleteReadError, ValueError, OSError, zlib.error) as e:
            raise UpstreamError(
                "RemoteProtocolError" if not isinstance(e, OSError) else "ReadError"
            ) from None
        self._done = True

    def close(self) -> None:
        """Give the connection back when the body was read whole and it may be reused."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._done and _reusable(self.headers):
            conn.pool.put(conn)
        else:
            conn.close()


class _Conn:
    def __init__(self, pool: _Pool, reader: asyncio.StreamReader, writer: Any) -> None:
        self.pool, self.reader, self.writer = pool, reader, writer

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()

    @property
    def alive(self) -> bool:
        return not self.reader.at_eof() and not self.writer.is_closing()


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
        parts = urlsplit(url)
        https = parts.scheme == "https"
        host = parts.hostname or "localhost"
        port = parts.port or (443 if https else 80)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        default = (https and port == 443) or (not https and port == 80)
        lines = [
            f"POST {target} HTTP/1.1",
            f"Host: {host if default else f'{host}:{port}'}",
            f"Content-Length: {len(body)}",
            "Accept-Encoding: identity",
        ]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        pool = self._pools.setdefault((parts.scheme, host, port), _Pool())
        conn = pool.take()
        if conn is not None:
            try:
                return await self._exchange(conn, head, body, timeout)
            except UpstreamError as e:
                if e.kind != "Stale":
                    raise
        conn = await self._connect(pool, host, port, https, timeout)
        try:
            return await self._exchange(conn, head, body, timeout)
        except UpstreamError as e:
            raise UpstreamError("RemoteProtocolError") if e.kind == "Stale" else e from None

    async def _connect(
        self, pool: _Pool, host: str, port: int, https: bool, timeout: float
    ) -> _Conn:
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_connection(
                    host,
                    port,
                    ssl=self._tls if https else None,
                    server_hostname=host if https else None,
                    limit=MAX_HEADER_BYTES,
                )
        except TimeoutError:
            raise
        except (OSError, ssl.SSLError):
            raise UpstreamError("ConnectError") from None
        sock = writer.get_extra_info("socket")
        if sock is not None:
            import socket

            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _Conn(pool, reader, writer)

    async def _exchange(self, conn: _Conn, head: bytes, body: bytes, timeout: float) -> Response:
        """Write the request, read the status and headers. A pooled connection closed
        before any byte of an answer raises UpstreamError("Stale") (safe to resend)."""
        got_any = False
        try:
            conn.writer.write(head + body if len(body) < 65536 else head)
            if len(body) >= 65536:
                conn.writer.write(body)
            async with asyncio.timeout(timeout):
                await conn.writer.drain()
                while True:
                    try:
                        raw = await conn.reader.readuntil(b"\r\n\r\n")
                    except asyncio.IncompleteReadError as e:
                        got_any = got_any or bool(e.partial)
                        raise
                    got_any = True
                    status, headers = _parse_head(raw)
                    if status >= 200 or status == 101:
                        break  # 1xx (100 Continue, 103 Early Hints) come before the answer
        except TimeoutError:
            conn.close()
            raise
        except (asyncio.IncompleteReadError, ConnectionError):
            conn.close()
            raise UpstreamError("RemoteProtocolError" if got_any else "Stale") from None
        except (asyncio.LimitOverrunError, ValueError, OSError):
            conn.close()
            raise UpstreamError("RemoteProtocolError") from None
        return Response(conn, status, headers)

    async def close(self) -> None:
        self.closed = True
        for pool in self._pools.values():
            for conn in pool.idle:
                conn.close()
            pool.idle.clear()


def _parse_head(raw: bytes) -> tuple[int, dict[str, str]]:
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


def _reusable(headers: dict[str, str]) -> bool:
    return "close" not in headers.get("connection", "").lower()


async def _body(
    reader: asyncio.StreamReader, status: int, headers: dict[str, str], timeout: float
) -> AsyncIterator[bytes]:
    if status in (204, 304) or 100 <= status < 200:
        return
    if "chunked" in headers.get("transfer-encoding", "").lower():
        # Decoded per network read, not per HTTP chunk: a stream of small chunks costs
        # one await (and one write downstream) per read, however many chunks it held.
        dechunk = _Dechunker()
        while not dechunk.done:
            async with asyncio.timeout(timeout):
                raw = await reader.read(_READ)
            if not raw:
                raise asyncio.IncompleteReadError(b"", None)
            data = dechunk.feed(raw)
            if data:
                yield data
        if dechunk.extra:
            headers["connection"] = "close"  # bytes past the body: not ours to reuse
        return
    length = headers.get("content-length")
    if length is not None:
        left = int(length)
        while left > 0:
            async with asyncio.timeout(timeout):
                data = await reader.read(min(left, _READ))
            if not data:
                raise asyncio.IncompleteReadError(b"", left)
            left -= len(data)
            yield data
        return
    headers["connection"] = "close"  # the body ends with the connection
    while True:
        async with asyncio.timeout(timeout):
            data = await reader.read(_READ)
        if not data:
            return
        yield data


class _Dechunker:
    """Incremental `Transfer-Encoding: chunked` decoding (RFC 9112 7.1), whole chunks at
    a time: a chunk's data is passed on once all of it is in (an SSE chunk is one event,
    of no use to the harness in part), so a read costs a few C calls per chunk."""

    def __init__(self) -> None:
        self._buf = b""
        self.done = False
        self.extra = False

    def feed(self, data: bytes) -> bytes:
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
            size = int(line.split(b";", 1)[0] if b";" in line else line, 16)
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


class AiohttpUpstream:
    """The same interface over aiohttp, for an upstream behind the environment's
    HTTP(S)_PROXY (which aiohttp speaks to); one per proxy that needs it."""

    def __init__(self, tls: ssl.SSLContext, via: dict[str, Any]) -> None:
        self._via = via
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, ssl=tls),
            # No cookies: a sticky-routing cookie of one session must not ride on another's.
            cookie_jar=aiohttp.DummyCookieJar(),
        )
        self.closed = False

    async def post(self, url: str, body: bytes, headers: dict[str, str], timeout: float) -> Any:
        limits = aiohttp.ClientTimeout(total=None, sock_connect=timeout, sock_read=timeout)
        try:
            resp = await self._session.post(
                url, data=body, headers=headers, timeout=limits, **self._via
            )
        except aiohttp.ClientConnectorError:
            raise UpstreamError("ConnectError") from None
        except aiohttp.ClientError as e:
            raise UpstreamError(type(e).__name__) from None
        return _AiohttpResponse(resp)

    async def close(self) -> None:
        self.closed = True
        await self._session.close()


class _AiohttpResponse:
    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self._resp = resp
        self.status = resp.status
        self.headers = {k.lower(): v for k, v in resp.headers.items()}

    async def read(self, timeout: float) -> bytes:
        try:
            return await self._resp.read()
        except aiohttp.ClientError as e:
            raise UpstreamError(type(e).__name__) from None

    async def iter_any(self, timeout: float) -> AsyncIterator[bytes]:
        try:
            async for data in self._resp.content.iter_any():
                yield data
        except aiohttp.ClientError as e:
            raise UpstreamError(type(e).__name__) from None

    def close(self) -> None:
        self._resp.close()
