"""OpenEnv's own server (`create_app`: its HTTP routes and `/ws`) over `DurableEpisodeEnv`,
and how a `/ws` connection's end ends its session.

OpenEnv's `/ws` makes one environment per connection and closes it however the
connection ends. Here the two ends differ, so one ASGI wrapper around OpenEnv's app
watches each connection: the client ended it (OpenEnv's `close` message, which
`EnvClient.close()` sends, or a normal closure, 1000) -> the session ends and is
scored; it dropped (no closing handshake, the trainer's process gone, this server
shutting down) -> the session parks, its box released, until a client re-attaches
with `reset(episode_id=...)` or the spec's `max_parked_s` passes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, MutableMapping
from typing import Any

import uvicorn
from openenv.core.env_server.http_server import create_app
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.websockets import WebSocketDisconnect

from episodes.errors import EpisodesError
from episodes.integrations.openenv.env import (
    Connection,
    DurableEpisodeEnv,
    EpisodeAction,
    EpisodeObservation,
    SpecSessions,
    current_connection,
)

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

NORMAL_CLOSURE = 1000  # RFC 6455: the peer is done (a drop arrives as 1006)


class ConnectionEnds:
    """ASGI wrapper: each websocket connection gets a `Connection` (the environment reads
    it through `current_connection`); once OpenEnv's handler returns, the session the
    connection held ends (closed by the client) or parks (dropped)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return
        connection = Connection()

        async def watched() -> Message:
            message = await receive()
            if message["type"] == "websocket.receive" and _is_close(message.get("text")):
                connection.closed_by_client = True
            elif message["type"] == "websocket.disconnect":
                if message.get("code") == NORMAL_CLOSURE:
                    connection.closed_by_client = True
            return message

        token = current_connection.set(connection)
        try:
            await self.app(scope, watched, send)
        except WebSocketDisconnect:
            pass  # OpenEnv's handler closing a socket its peer closed first: over anyway
        finally:
            current_connection.reset(token)
            await _finish(connection)


def _is_close(text: str | None) -> bool:
    """OpenEnv's `{"type": "close"}` message."""
    if not text or '"close"' not in text:
        return False
    try:
        data = json.loads(text)
    except ValueError:
        return False
    return isinstance(data, dict) and data.get("type") == "close"


async def _finish(connection: Connection) -> None:
    env = connection.env
    if env is None or env.session is None:
        return
    session = env.session
    try:
        await env.end(session, connection, closed=connection.closed_by_client)
    except Exception as e:  # the connection is gone: nobody to tell but the log
        what = "close" if connection.closed_by_client else "park"
        log.warning("could not %s session %s: %s", what, session.workflow_id, e)


def make_app(sessions: SpecSessions, *, max_sessions: int) -> ASGIApp:
    """OpenEnv's app for `sessions`' spec (at most `max_sessions` `/ws` connections at
    once), its connections' ends watched."""
    app = create_app(
        lambda: DurableEpisodeEnv(sessions),
        EpisodeAction,
        EpisodeObservation,
        env_name=sessions.spec.name,
        max_concurrent_envs=max_sessions,
    )
    # Over HTTP, a refused reset or step is a 400 saying why, not a bare 500 (over /ws,
    # OpenEnv answers any error with its message already).
    app.add_exception_handler(EpisodesError, _refused)
    return ConnectionEnds(app)


async def _refused(request: Request, e: Exception) -> JSONResponse:
    return JSONResponse({"detail": str(e)}, status_code=400)


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: the command (or test) that serves decides
    when to stop."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.asynccontextmanager
async def serve(app: ASGIApp, *, host: str = "127.0.0.1", port: int = 0) -> AsyncIterator[str]:
    """Serve `app` until the block ends (`port` 0: any free port): its base URL. At the end
    the open connections are closed as a shutdown (1012): their sessions park."""
    try:
        sock = socket.create_server((host, port))
    except OSError as e:
        raise EpisodesError(f"cannot serve on {host}:{port}: {e.strerror or e}") from None
    server = _Server(uvicorn.Config(app, log_level="warning"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()  # it failed to start: say why
                raise EpisodesError(f"the OpenEnv server did not start on {host}:{port}")
            await asyncio.sleep(0.05)
        bound = sock.getsockname()[1]
        shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
        yield f"http://{shown}:{bound}"
    finally:
        server.should_exit = True
        await task
        sock.close()
