"""A session's calls to its model upstream: the shared client, retries, the key kept out.

The proxy (episodes/agents/proxy.py) hands each call's body here; `Sender.send` POSTs
it with the session's headers (the upstream key, `X-Session-ID`) on the worker loop's
one pooled client (episodes/agents/upstream.py; aiohttp behind an environment
HTTP(S)_PROXY), retries 429 / 5xx / timeouts / connection errors with exponential
backoff (a `Retry-After` within the cap is honoured), and names what went wrong in one
line that never holds the key (`Exhausted`).
"""

from __future__ import annotations

import asyncio
import functools
import json
import ssl
from typing import Any

import httpx

from episodes.agents.upstream import Response, Upstream, UpstreamError
from episodes.agents.upstream_aiohttp import AiohttpUpstream
from episodes.json_depth import text_too_deep
from episodes.types.model import ModelSpec

# The session's id on every upstream request, for routers that pin sessions to replicas.
SESSION_HEADER = "X-Session-ID"


def one_line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def error_text(raw: bytes) -> str:
    """The message of an upstream error body (OpenAI-style when it is), else its text."""
    try:
        if text_too_deep(raw):  # json.loads would recurse per level: read it as text
            raise ValueError
        body = json.loads(raw)
        if isinstance(body, dict):
            err = body.get("error", body)
            if isinstance(err, dict) and err.get("message"):
                return str(err["message"])
            if isinstance(err, str):
                return err
    except ValueError:
        pass
    return raw.decode("utf-8", "replace") or "(empty body)"


class Exhausted(Exception):
    pass


class Sender:
    def __init__(
        self,
        spec: ModelSpec,
        key: str | None,
        session_id: str | None,
        backoff_s: float,
        max_backoff_s: float,
    ) -> None:
        self._key = key
        self._timeout = spec.timeout_s
        self._retries = spec.retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self._client: Upstream | AiohttpUpstream | None = None
        # Built once: what every call sends upstream besides its body.
        self._url = spec.base_url.rstrip("/") + "/chat/completions"
        self._headers = {"Content-Type": "application/json"}
        if key:
            self._headers["Authorization"] = f"Bearer {key}"
        if session_id:
            self._headers[SESSION_HEADER] = session_id

    async def start(self) -> None:
        via = await asyncio.to_thread(_env_proxy, self._url)
        # Behind the environment's HTTP(S)_PROXY: aiohttp (it speaks to proxies), own.
        self._client = AiohttpUpstream(_tls_context(), via) if via else _acquire_client()

    async def close(self) -> None:
        client, self._client = self._client, None
        if isinstance(client, AiohttpUpstream):
            await client.close()
        elif client is not None:
            await _release_client()

    async def send(self, body: dict[str, Any], *, read: bool) -> tuple[Response, bytes, int]:
        """POST upstream with retries: (response, body if `read`, attempts), or Exhausted."""
        assert self._client is not None
        attempts = self._retries + 1
        last = "no attempt made"
        data = json.dumps(body).encode()
        for attempt in range(1, attempts + 1):
            delay = min(self.backoff_s * 2 ** (attempt - 1), self.max_backoff_s)
            try:
                resp = await self._client.post(self._url, data, self._headers, self._timeout)
                if resp.status != 429 and resp.status < 500:
                    raw = await self.read_closing(resp) if read else b""
                    return resp, raw, attempt
                raw = await self.read_closing(resp)
                last = f"upstream HTTP {resp.status}: {error_text(raw)}"
                retry_after = resp.headers.get("retry-after", "")
                if retry_after.replace(".", "", 1).isdigit():
                    delay = min(max(float(retry_after), delay), self.max_backoff_s)
            except TimeoutError:
                last = f"upstream timed out after {self._timeout:g} s"
            except UpstreamError as e:
                last = f"upstream unreachable ({e.kind})"
            if attempt < attempts:
                await asyncio.sleep(delay)
        raise Exhausted(self.scrub(f"model call failed after {attempts} attempt(s): {last}"))

    async def read_closing(self, resp: Response) -> bytes:
        try:
            return await resp.read(self._timeout)
        finally:
            resp.close()

    def scrub(self, text: str) -> str:
        text = one_line(text)
        if self._key:
            text = text.replace(self._key, "***")
        return text


# One upstream client per event loop, shared by every session's proxy on it (a worker's
# sessions): one connection pool, one TLS context, ~no memory per session. Counted:
# the last proxy to stop closes it (tests run one loop per test).
_clients: dict[asyncio.AbstractEventLoop, tuple[Upstream, int]] = {}


def _acquire_client() -> Upstream:
    loop = asyncio.get_running_loop()
    client, users = _clients.get(loop, (None, 0))
    if client is None or client.closed:
        client, users = Upstream(_tls_context()), 0
    _clients[loop] = (client, users + 1)
    return client


async def _release_client() -> None:
    loop = asyncio.get_running_loop()
    client, users = _clients.get(loop, (None, 0))
    if client is None:
        return
    if users > 1:
        _clients[loop] = (client, users - 1)
        return
    del _clients[loop]
    await client.close()


def _env_proxy(url: str) -> dict[str, Any]:
    """The HTTP(S)_PROXY / NO_PROXY the environment sets for `url` (as httpx read them),
    as keyword arguments for a request."""
    from aiohttp.helpers import get_env_proxy_for_url
    from yarl import URL

    try:
        proxy, auth = get_env_proxy_for_url(URL(url))
    except LookupError:
        return {}
    return {"proxy": proxy, "proxy_auth": auth}


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """httpx's default verification (certifi, or SSL_CERT_FILE / SSL_CERT_DIR), built
    once per process: loading the CA bundle costs ~50 ms, which every session's proxy
    would pay at start. One context is safe to share across clients."""
    return httpx.create_ssl_context()
