"""A session's calls to its model upstream: the shared client, retries, the key kept out.

The proxy (episodes/model/proxy.py) hands each call's body here; `Sender.send` POSTs
it with the session's headers (the upstream key, `X-Session-ID`) to the session's
replica of the fleet (episodes/model/fleet.py) on the worker loop's one pooled client (episodes/model/upstream.py; aiohttp behind an environment
HTTP(S)_PROXY), retries 5xx / timeouts / connection errors with exponential backoff,
moves to another replica when its own fails, waits on 429 / 503 (`Retry-After`
honoured) without charging them to `retries`, and names what went wrong in one
line that never holds the key (`Exhausted`).
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import ssl
from typing import Any

import httpx

from episodes.json_depth import text_too_deep
from episodes.model.fastjson import dumps
from episodes.model.fleet import Replica, Route
from episodes.model.upstream import Response, Upstream, UpstreamError
from episodes.model.upstream_aiohttp import AiohttpUpstream
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
    """The call could not be served; `served_by`: the replica of its last attempt."""

    def __init__(self, message: str, served_by: Replica | None = None) -> None:
        super().__init__(message)
        self.served_by = served_by

    @property
    def upstream(self) -> str | None:
        """The replica's name, as records show it."""
        return None if self.served_by is None else self.served_by.name


class Sent:
    """A call's answer: the response, its body if read, the attempts it took and the
    replica that served it. An unread answer (a 2xx stream) holds its place under that
    replica's limit until `release()` (once; later calls are no-ops), whichever task
    calls it, and is credited to the replica by `ended()`, once its body is through."""

    __slots__ = ("_held", "attempts", "head_s", "raw", "replica", "resp")

    def __init__(
        self,
        resp: Response,
        raw: bytes,
        attempts: int,
        replica: Replica,
        *,
        held: bool,
        head_s: float | None = None,
    ) -> None:
        self.resp = resp
        self.raw = raw
        self.attempts = attempts
        self.replica = replica
        self._held = held
        self.head_s = head_s  # from sending the call to its answer's head

    def ended(self, *, broke: bool) -> None:
        """An unread answer's body is through (before `release()`): a success, its
        latency the head's, or, when the upstream broke it, a failure like one before
        the head (counted towards ejecting the replica)."""
        if broke:
            self.replica.failure(refused=False)
        else:
            self.replica.succeeded(self.head_s)

    @property
    def upstream(self) -> str:
        """The replica's name, as records show it."""
        return self.replica.name

    def release(self) -> None:
        if self._held:
            self._held = False
            self.replica.release()


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
        self._spec = spec
        self._timeout = spec.timeout_s
        self._retries = spec.retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self._clients: dict[str, Upstream | AiohttpUpstream] = {}
        self.route: Route | None = None  # the session's way to the fleet (fleet.py)
        self._queued: set[asyncio.Task[Any]] = set()  # calls waiting for a place
        self._closed = False
        # Built once: what every call sends upstream besides its body.
        self._headers = {"Content-Type": "application/json"}
        if key:
            self._headers["Authorization"] = f"Bearer {key}"
        if session_id:
            self._headers[SESSION_HEADER] = session_id

    async def start(self) -> None:
        self.route = Route(self._spec)
        shared: Upstream | None = None
        for r in self.route.replicas:
            via = await _proxy_for(r.chat_url)
            if via:  # behind the environment's HTTP(S)_PROXY: aiohttp (it speaks to proxies)
                self._clients[r.chat_url] = AiohttpUpstream(_tls_context(), via)
            else:
                shared = shared or _acquire_client()
                self._clients[r.chat_url] = shared

    async def close(self) -> None:
        self._closed = True
        for task in self._queued:  # they leave their replica's queue (Replica.acquire)
            task.cancel()
        if self.route is not None:
            self.route.close()
        clients, self._clients = self._clients, {}
        own = False
        for client in clients.values():
            if isinstance(client, AiohttpUpstream):
                await client.close()
            else:
                own = True
        if own:
            await _release_client()

    async def send(self, body: dict[str, Any], *, read: bool) -> Sent:
        """POST upstream: the answer (`Sent`), or Exhausted.

        The session's replica (fleet.py) is tried `retries` + 1 times on 5xx, timeouts
        and connection errors, with exponential backoff; when it gives up or is ejected
        the call moves to another replica (its attempts counted afresh). 429 / 503 (and
        the wait for a place under a replica's limit) are not charged to `retries` for
        `max_throttle_s` in all: the call waits (`Retry-After` honoured) and tries again.
        A body that breaks (or times out) after its head fails the attempt like a
        failure before it; a replica is credited with a success only once the body is
        read. Not `read`: a 2xx body is the caller's to forward, then `Sent.ended()`
        and `Sent.release()` (any other answer is read here).
        """
        assert self.route is not None
        loop = asyncio.get_running_loop()
        data = dumps(body)
        given_up: set[Replica] = set()
        attempts = charged = throttles = 0
        throttle_left = self._spec.max_throttle_s
        last = "no attempt made"
        on: Replica | None = None  # the replica the attempts are charged to
        tried: Replica | None = None  # the replica of the last attempt
        while True:
            if self._closed:  # (after a backoff too) a closed route would stick again
                raise Exhausted("model call not sent: the session is closed", tried)
            r = self.route.pick(given_up)
            if r is None:
                where = f" on {len(given_up)} upstreams" if len(given_up) > 1 else ""
                raise Exhausted(
                    self.scrub(f"model call failed after {attempts} attempt(s){where}: {last}"),
                    tried,
                )
            if r is not on:
                on, charged = r, 0
            queued = loop.time()
            await self._acquire(r, tried)
            throttle_left -= loop.time() - queued
            attempts += 1
            sent_at = loop.time()
            tried = r
            delay = min(self.backoff_s * 2**charged, self.max_backoff_s)
            refused = False
            try:
                resp = await self._clients[r.chat_url].post(
                    r.chat_url, data, self._headers, self._timeout
                )
            except TimeoutError:
                last, resp = f"upstream timed out after {self._timeout:g} s", None
            except UpstreamError as e:
                last, resp = f"upstream unreachable ({e.kind})", None
                refused = e.kind == "ConnectError"
            except BaseException:
                r.release()
                raise
            raw = b""
            head_s = loop.time() - sent_at
            if resp is not None and (read or not 200 <= resp.status < 300):
                # The body, before anything is credited: an upstream that sends its head
                # and breaks the body (killed mid-answer) failed this attempt.
                try:
                    raw = await self.read_closing(resp)
                except TimeoutError:
                    last = (
                        f"upstream HTTP {resp.status}: its body timed out after {self._timeout:g} s"
                    )
                    resp = None
                except UpstreamError as e:
                    last = f"upstream HTTP {resp.status}: its body broke ({e.kind})"
                    resp = None
                except BaseException:
                    r.release()
                    raise
            if resp is not None and resp.status not in (429, 503) and resp.status < 500:
                if not 200 <= resp.status < 300:  # the harness's mistake: not a latency
                    r.answered()  # sample (fleet.py)
                elif not read:  # a stream: credited once it is through (`Sent.ended`)
                    return Sent(resp, b"", attempts, r, held=True, head_s=head_s)
                else:
                    r.succeeded(head_s)  # latency: to the answer's head
                r.release()
                return Sent(resp, raw, attempts, r, held=False)
            r.release()
            if resp is not None:
                last = f"upstream HTTP {resp.status}: {error_text(raw)}"
                if resp.status in (429, 503):
                    r.throttle(sent_at)
                    throttles += 1
                    wait = min(self.backoff_s * 2 ** min(throttles - 1, 8), self.max_backoff_s)
                    retry_after = resp.headers.get("retry-after", "")
                    if retry_after.replace(".", "", 1).isdigit():
                        wait = max(float(retry_after), 0.0)
                    if wait <= throttle_left:
                        throttle_left -= wait
                        r.backing_off += 1
                        try:
                            await asyncio.sleep(wait)
                        finally:
                            r.backing_off -= 1
                        continue  # slowed down, not charged
            if resp is None or resp.status not in (429, 503):
                r.failure(refused=refused)
            charged += 1
            if charged > self._retries:
                r.eject()  # it kept failing after retries
                given_up.add(r)
                continue
            if not r.healthy(loop.time()) and len(self.route.choices) > 1:
                given_up.add(r)  # ejected: move now if another can serve
                continue
            await asyncio.sleep(delay)

    async def _acquire(self, r: Replica, tried: Replica | None) -> None:
        """A place under `r`'s limit; a call still waiting when the session closes is
        cancelled, one handed its place as it closed gives it back (Exhausted)."""
        task = asyncio.current_task()
        assert task is not None
        self._queued.add(task)
        try:
            await r.acquire()
        finally:
            self._queued.discard(task)
        if self._closed:
            r.release()
            raise Exhausted("model call not sent: the session closed while it waited", tried)

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


# What decides an upstream's proxy: aiohttp's `get_env_proxy_for_url` reads urllib's
# `getproxies()` for these schemes, NO_PROXY, and netrc for the proxy's credentials.
_PROXY_ENV = (
    *(
        n
        for s in ("http", "https", "ws", "wss", "no")
        for n in (f"{s}_proxy", f"{s.upper()}_PROXY")
    ),
    "NETRC",
    "REQUEST_METHOD",
)
_env_proxies: dict[tuple[str, tuple[str | None, ...]], dict[str, Any]] = {}


async def _proxy_for(url: str) -> dict[str, Any]:
    """`_env_proxy(url)`, looked up (in a thread: netrc is a file) once per process and
    URL while the environment's proxy variables stay as they are, not per session."""
    key = (url, tuple(map(os.environ.get, _PROXY_ENV)))
    via = _env_proxies.get(key)
    if via is None:
        via = _env_proxies[key] = await asyncio.to_thread(_env_proxy, url)
    return via


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
