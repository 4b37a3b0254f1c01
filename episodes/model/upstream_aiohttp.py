"""The model proxy's upstream client over aiohttp, for an upstream behind the
environment's HTTP(S)_PROXY (aiohttp speaks to proxies; episodes/model/upstream.py
does not). The same interface as `Upstream`."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp

from episodes.model.upstream import SlowReader, UpstreamError


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

    async def forward(self, sink: Callable[[bytes], None], timeout: float) -> None:
        """As `Response.forward`, from a task (aiohttp reads for us)."""
        self._stopped = False
        self._resumed = asyncio.Event()
        self._resumed.set()
        loop = asyncio.get_running_loop()
        left = timeout  # the reader may hold the stream this long in all (SlowReader)
        async for data in self.iter_any(timeout):
            sink(data)
            if self._stopped:
                return
            if not self._resumed.is_set():
                began = loop.time()
                try:
                    await asyncio.wait_for(self._resumed.wait(), left)
                except TimeoutError:
                    raise SlowReader() from None
                left -= loop.time() - began

    def pause(self) -> None:
        self._resumed.clear()

    def resume(self) -> None:
        self._resumed.set()

    def stop(self) -> None:
        self._stopped = True
        self._resumed.set()

    def close(self) -> None:
        self._resp.close()
