"""The tool bridge's HTTP side: a bearer-token ASGI guard and uvicorn run in-process
(no signal handlers, a prompt stop), for `episodes.tools.bridge`.

The harness is untrusted, so what it can make the bridge hold is bounded as the model
proxy's (`harness.limits`): the token and the request's size are judged on its head,
before the app reads a byte of the body (uvicorn itself buffers at most 64 KiB of it);
a body needs a Content-Length (411), at most `request_bytes` held at once (413 / 429),
judged on its head against the session's `turn_request_bytes` (413 / 429) and charged
to it once read whole, as the model proxy's (`StreamBudget.judge_request`: a request
refused or abandoned is not charged); at most `connections` open (503,
closed); a connection with no request for `idle_timeout_s`, or a request that takes
longer than `request_timeout_s` to arrive, is closed (uvicorn alone holds a silent
connection for good).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import socket
from typing import TYPE_CHECKING, Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from episodes.types.harness import HarnessLimits

if TYPE_CHECKING:
    from episodes.harness.budget import StreamBudget


class BearerAuth:
    """ASGI wrapper: every HTTP request needs `Authorization: Bearer <token>` and, with a
    body, a Content-Length within the session's limits and budget."""

    def __init__(
        self,
        app: Any,
        token: str,
        limits: HarnessLimits | None = None,
        budget: StreamBudget | None = None,
    ) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()
        self.limits = limits or HarnessLimits()
        self.budget = budget
        self.held = 0  # Content-Lengths of the requests being served

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            return await self.app(scope, receive, send)
        if scope["type"] != "http":  # websockets are not served
            return
        headers = dict(scope.get("headers") or ())
        given = headers.get(b"authorization", b"")
        # Constant time: the answer's timing must not leak the token.
        if not hmac.compare_digest(given, self._expected):
            return await _refuse(send, 401, "unauthorized")
        length = headers.get(b"content-length")
        if length is None:
            if b"transfer-encoding" in headers:
                return await _refuse(send, 411, "a request body needs a Content-Length")
            return await self.app(scope, receive, send)
        size = int(length)  # digits only: the parser (llhttp) took nothing else
        if self.held + size > self.limits.request_bytes:
            status = 413 if size > self.limits.request_bytes else 429
            return await _refuse(send, status, "request too large (harness.limits.request_bytes)")
        if self.budget is not None:
            # Judged, not charged (as the model proxy's): a request refused here or
            # abandoned before its body is whole is not the turn's.
            refused = self.budget.judge_request(size)
            if refused is not None:
                return await _refuse(send, *refused)
        self.held += size
        try:
            if self.budget is None:
                return await self.app(scope, receive, send)
            body = await _whole_body(receive)
            if body is None:
                return  # the harness went away before its body was whole: not charged
            why = self.budget.charge_request(len(body))  # accepted: charged
            if why is not None:
                return await _refuse(send, 429, why)
            await self.app(scope, _replay(body, receive), send)
        finally:
            self.held -= size


async def _whole_body(receive: Any) -> bytes | None:
    """The request's body read whole (within `request_bytes`, judged on its head), or
    None if the client disconnected first."""
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        body += message.get("body", b"")
        if not message.get("more_body", False):
            return bytes(body)


def _replay(body: bytes, receive: Any) -> Any:
    """A `receive` for the app that hands it the body already read, then goes on."""
    given = False

    async def replayed() -> dict[str, Any]:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


async def _refuse(send: Any, status: int, why: str) -> None:
    body = json.dumps({"error": why}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        # The body is not read: the connection is not reused.
        (b"connection", b"close"),
    ]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="episodes"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def bounded_protocol(limits: HarnessLimits) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol with the session's bounds on connections and time."""

    class Bounded(HttpToolsProtocol):
        _timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > limits.connections:
                transport.write(
                    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
                    b"Connection: close\r\n\r\n"
                )
                transport.close()
                return
            self._expire_in(limits.idle_timeout_s)  # the first request, or closed

        def connection_lost(self, exc: Exception | None) -> None:
            self._expire_in(None)
            super().connection_lost(exc)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._expire_in(limits.request_timeout_s)

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._expire_in(None)  # served: then uvicorn's keep-alive timeout

        def _expire_in(self, seconds: float | None) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if seconds is not None:
                self._timer = self.loop.call_later(seconds, self.transport.close)

    return Bounded


class InProcessServer(uvicorn.Server):
    """uvicorn in-process: no signal handlers, a startup event, no SystemExit, and a
    stop that is not paced by uvicorn's 0.1 s polls.

    uvicorn checks `should_exit` every 0.1 s, then sleeps 0.1 s after asking the open
    connections to close, then polls them every 0.1 s: ~0.2 s per session's stop, paid
    by every episode with tools. Here `exit()` wakes the loop at once and the drain
    polls every 5 ms, with the same graceful timeout."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.started_event = asyncio.Event()
        self._exit = asyncio.Event()

    def exit(self) -> None:
        self.should_exit = True
        self._exit.set()

    async def main_loop(self) -> None:
        # on_tick(0) refreshes the Date header and reads should_exit, once a second
        # or at once when exit() is called.
        while not await self.on_tick(0):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._exit.wait(), 1.0)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()  # no new connections
        for connection in list(self.server_state.connections):
            connection.shutdown()  # close once their response is sent
        try:
            await asyncio.wait_for(self._drained(), self.config.timeout_graceful_shutdown)
        except TimeoutError:
            for task in self.server_state.tasks:
                task.cancel(msg="the tool bridge stopped")
        if not self.force_exit:
            await self.lifespan.shutdown()

    async def _drained(self) -> None:
        while self.server_state.connections or self.server_state.tasks:
            await asyncio.sleep(0.005)
        for server in self.servers:
            await server.wait_closed()

    @contextlib.contextmanager
    def capture_signals(self) -> Any:
        # The worker owns SIGINT/SIGTERM; several bridges at once would also
        # restore each other's handlers out of order.
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        try:
            await super().startup(sockets=sockets)
        except SystemExit:
            # uvicorn exits the process when the app's startup fails; in a worker
            # that must be an error of this bridge only.
            raise RuntimeError("ToolBridge: the MCP app failed to start") from None
        self.started_event.set()
