"""The tool bridge's HTTP side: a bearer-token ASGI guard and uvicorn run in-process
(no signal handlers, a prompt stop), for `episodes.agents.bridge`."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import socket
from typing import Any

import uvicorn


class BearerAuth:
    """ASGI wrapper: every HTTP request needs `Authorization: Bearer <token>`."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or ()).get(b"authorization", b"")
            # Constant time: the answer's timing must not leak the token.
            if not hmac.compare_digest(given, self._expected):
                await _unauthorized(send)
                return
        elif scope["type"] != "lifespan":  # websockets are not served
            return
        await self.app(scope, receive, send)


async def _unauthorized(send: Any) -> None:
    body = b'{"error": "unauthorized"}'
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"www-authenticate", b'Bearer realm="episodes"'),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


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
