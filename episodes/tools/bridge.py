"""Serve one episode's environment tools to its harness over MCP (streamable HTTP).

    bridge = ToolBridge(env.tools(), on_call=record)   # callables or a fastmcp.FastMCP
    await bridge.start()                               # accepting connections on return
    harness_env.update(bridge.env())                   # EPISODES_MCP_URL, EPISODES_MCP_TOKEN
    ...
    await bridge.stop()                                # idempotent; connections refused after

The server runs in-process on the caller's asyncio loop (uvicorn without its
signal handlers), so the tools run in the env object the session holds and
`step`/`score` see what they did. It listens on 127.0.0.1 (a free port unless one
is given) and, for boxes without a network, on a Unix socket in a private
directory that a runtime bind-mounts into the box (see `episodes.tunnel.relay`).

Every request must carry `Authorization: Bearer <token>`, a per-session secret:
anything else is answered 401 before it reaches MCP, so another session's
harness, or any other local process, cannot call this session's tools.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import secrets
import shutil
import socket
import stat
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import uvicorn
from fastmcp import FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.server.middleware import Middleware, MiddlewareContext
from fastmcp.tools.base import ToolResult
from mcp.types import TextContent

from episodes.json_depth import too_deep_message, value_too_deep
from episodes.net import tcp_listener
from episodes.replay import Replay, recorded_tool_result
from episodes.tools.bridge_http import BearerAuth, InProcessServer, bounded_protocol
from episodes.types.harness import HarnessLimits

if TYPE_CHECKING:
    from episodes.harness.budget import StreamBudget

log = logging.getLogger(__name__)

ENV_URL = "EPISODES_MCP_URL"
ENV_TOKEN = "EPISODES_MCP_TOKEN"
MCP_PATH = "/mcp"
SOCKET_NAME = "mcp.sock"

ToolCallback = Callable[[dict[str, Any]], Awaitable[None] | None]
Tools = Sequence[Callable[..., Any]] | Mapping[str, Callable[..., Any]] | FastMCP | None

# Seconds uvicorn waits for open connections (a harness's SSE stream) at stop
# before it cancels their tasks; a bridge stops when its episode is over.
_GRACEFUL_STOP_S = 1  # whole seconds: uvicorn declares timeout_graceful_shutdown an int


class ToolBridge:
    """One session's tools on MCP streamable HTTP, bearer-token protected."""

    def __init__(
        self,
        tools: Tools,
        *,
        token: str | None = None,
        on_call: ToolCallback | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        unix_socket: bool | str | os.PathLike[str] = False,
        name: str = "episodes-env-tools",
        limits: HarnessLimits | None = None,
        budget: StreamBudget | None = None,
    ) -> None:
        """`unix_socket`: True puts `mcp.sock` in a fresh private directory this
        bridge owns (removed at stop); a path uses that socket path, whose
        directory must exist and be private (mode 0700: no group/other bits).
        `limits` bound the connections, request bytes and times the harness may take
        (`harness.limits`); request bodies are charged to `budget` (the session's)."""
        if token is not None and not token:
            raise ValueError("ToolBridge: token must be a non-empty string")
        self.token = token or secrets.token_urlsafe(32)
        self.on_call = on_call
        self.limits = limits or (budget.limits if budget is not None else HarnessLimits())
        self._budget = budget
        self._host = host
        self._port = port
        self._unix_request = unix_socket
        # Set while a restored session replays recorded turns (episodes/replay.py).
        self.replay: Replay | None = None
        self.mcp = _build_server(tools, name=name, report=self._report, replayed=self._replayed)
        self.socket_path: Path | None = None
        self.socket_dir: Path | None = None
        self._owns_dir = False
        self._sockets: list[socket.socket] = []
        self._server: InProcessServer | None = None
        self._serving: asyncio.Task[None] | None = None
        self._stopping: asyncio.Task[None] | None = None
        self.port: int | None = None

    # -- addresses -------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The loopback URL of the MCP endpoint, e.g. `http://127.0.0.1:PORT/mcp`."""
        if self.port is None:
            raise RuntimeError("ToolBridge: url asked for before start()")
        return f"http://{self._host}:{self.port}{MCP_PATH}"

    def env(self, url: str | None = None) -> dict[str, str]:
        """The harness's variables. `url` replaces the loopback URL for a harness that
        reaches the bridge another way (the in-box relay's port)."""
        return {ENV_URL: url or self.url, ENV_TOKEN: self.token}

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        """Bind, start serving, and return once connections are accepted."""
        if self._serving is not None:
            return
        if self._stopping is not None:
            raise RuntimeError("ToolBridge: start() after stop()")
        try:
            self._bind()
            app = BearerAuth(
                self.mcp.http_app(
                    path=MCP_PATH,
                    transport="http",
                    # The Host guard against DNS rebinding stays on: a browser page
                    # must not reach a loopback tool server; the relay sends
                    # `Host: 127.0.0.1:<port>`, which it allows.
                    host_origin_protection=True,
                ),
                self.token,
                self.limits,
                self._budget,
            )
            config = uvicorn.Config(
                app,
                lifespan="on",
                ws="none",
                http=bounded_protocol(self.limits),
                timeout_keep_alive=self.limits.idle_timeout_s,  # type: ignore[arg-type]
                # Leave the worker's logging as it is (uvicorn would dictConfig it).
                log_config=None,
                log_level=None,
                access_log=False,
                timeout_graceful_shutdown=_GRACEFUL_STOP_S,
            )
            self._server = InProcessServer(config)
            self._serving = asyncio.create_task(
                self._server.serve(sockets=self._sockets), name="episodes-tool-bridge"
            )
            started = asyncio.create_task(self._server.started_event.wait())
            done, _ = await asyncio.wait(
                {started, self._serving}, return_when=asyncio.FIRST_COMPLETED
            )
            if started not in done:
                started.cancel()
                # Serving ended before it started: its exception says why.
                await self._serving
                raise RuntimeError("ToolBridge: the server exited while starting")
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """Stop serving and remove the socket. Idempotent; completes even if cancelled."""
        if self._stopping is None:
            self._stopping = asyncio.ensure_future(self._stop())
        await asyncio.shield(self._stopping)

    async def __aenter__(self) -> ToolBridge:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _stop(self) -> None:
        server, serving = self._server, self._serving
        if server is not None and serving is not None and not serving.done():
            server.exit()
            try:
                await asyncio.wait_for(asyncio.shield(serving), _GRACEFUL_STOP_S + 5)
            except TimeoutError:
                log.warning("tool bridge did not stop in time; cancelling it")
                serving.cancel()
            except Exception as e:  # stopping must not fail on the server's error
                log.warning("tool bridge ended with %s: %s", type(e).__name__, e)
            with contextlib.suppress(BaseException):
                await serving
        for sock in self._sockets:
            sock.close()  # uvicorn closes them too; this covers a failed start
        if self.socket_path is not None:
            with contextlib.suppress(FileNotFoundError):
                self.socket_path.unlink()
        if self._owns_dir and self.socket_dir is not None:
            shutil.rmtree(self.socket_dir, ignore_errors=True)

    def _bind(self) -> None:
        # Bound here rather than by uvicorn so the port (port 0) is known up front
        # and the socket file gets its mode before anyone can connect.
        tcp = tcp_listener(self._host, self._port)
        self._sockets.append(tcp)
        self.port = tcp.getsockname()[1]
        if self._unix_request is False:
            return
        if self._unix_request is True:
            self.socket_dir = Path(tempfile.mkdtemp(prefix="episodes-mcp-"))  # mode 0700
            self._owns_dir = True
            self.socket_path = self.socket_dir / SOCKET_NAME
        else:
            self.socket_path = Path(self._unix_request)
            self.socket_dir = self.socket_path.parent
            mode = self.socket_dir.stat().st_mode
            if stat.S_IMODE(mode) & 0o077:
                raise PermissionError(
                    f"ToolBridge: socket directory {self.socket_dir} has mode "
                    f"{stat.S_IMODE(mode):04o}; it must be private (0700)"
                )
            # A previous bridge's socket (same pooled box) is replaced; anything else is not ours.
            if self.socket_path.is_socket():
                self.socket_path.unlink()
        unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sockets.append(unix)
        unix.bind(str(self.socket_path))
        os.chmod(self.socket_path, 0o600)

    # -- reporting -------------------------------------------------------------------

    def _replayed(self, name: str, arguments: Any) -> dict[str, Any] | None:
        """During a replay: the recorded call this one repeats (None: run the tool)."""
        return None if self.replay is None else self.replay.tool(name, arguments)

    async def _report(self, event: dict[str, Any]) -> None:
        if self.on_call is None:
            return
        try:
            result = self.on_call(event)
            if inspect.isawaitable(result):
                await result
        except Exception:  # a failing recorder must not fail the harness's tool call
            log.exception("tool bridge on_call callback failed")


# -- the MCP server ------------------------------------------------------------------


def _build_server(
    tools: Tools,
    *,
    name: str,
    report: Callable[[dict[str, Any]], Awaitable[None]],
    replayed: Callable[[str, Any], dict[str, Any] | None] | None = None,
) -> FastMCP:
    """A server with exactly `tools` and a middleware that reports every call."""
    middleware = _ReportCalls(report, replayed)
    server = FastMCP(name, middleware=[middleware])
    middleware.server = server
    if tools is None:
        return server
    if isinstance(tools, FastMCP):
        # Mounted, not modified: the env's server may be shared, and middleware added
        # to it would report one session's calls to every session's callback.
        server.mount(tools)
        return server
    items = tools.items() if isinstance(tools, Mapping) else ((None, fn) for fn in tools)
    for tool_name, fn in items:
        if not callable(fn):
            raise TypeError(f"ToolBridge: tool {tool_name or fn!r} is not callable")
        # run_in_thread=False: sync tools run on the loop, like the env's step and
        # score, so they never race them on the env's state.
        server.tool(fn, name=tool_name, run_in_thread=False)
    return server


class _ReportCalls(Middleware):
    def __init__(
        self,
        report: Callable[[dict[str, Any]], Awaitable[None]],
        replayed: Callable[[str, Any], dict[str, Any] | None] | None = None,
    ) -> None:
        self._report = report
        self._replayed = replayed
        self.server: FastMCP | None = None  # the server it is the middleware of

    async def on_call_tool(self, context: MiddlewareContext[Any], call_next: Any) -> Any:
        params = context.message
        event: dict[str, Any] = {
            "kind": "tool_call",
            "name": params.name,
            "arguments": dict(params.arguments or {}),
        }
        if value_too_deep(event["arguments"]):
            # The MCP server parses deeper JSON than Temporal's converter decodes: kept,
            # the turn would fail the workflow. Refused, and recorded without them.
            event["arguments"] = None
            event["error"] = too_deep_message("the tool call's arguments")
            await self._report(event)
            raise ToolError(event["error"])
        recorded = self._replayed(params.name, event["arguments"]) if self._replayed else None
        if recorded is not None:
            # A replay: the recorded answer, not run, not recorded again.
            if recorded.get("error") is not None:
                raise ToolError(str(recorded["error"]))
            return recorded_tool_result(recorded.get("result"), await self._schema(params.name))
        t0 = time.perf_counter()
        try:
            result = await call_next(context)
        except Exception as e:
            # Re-raised: FastMCP turns it into an isError result for the harness.
            event["error"] = str(e) or type(e).__name__
            event["ms"] = _ms(t0)
            await self._report(event)
            raise
        if isinstance(result, ToolResult) and result.is_error:
            event["error"] = _text(result) or "tool error"
        else:
            event["result"] = _jsonable(result)
        event["ms"] = _ms(t0)
        await self._report(event)
        return result

    async def _schema(self, name: str) -> dict[str, Any] | None:
        """The tool's output schema (a replayed answer is shaped as the tool's was)."""
        if self.server is None:
            return None
        try:
            tool = await self.server.get_tool(name)
        except Exception:
            return None
        return getattr(tool, "output_schema", None)


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000, 3)


def _text(result: ToolResult) -> str:
    return "\n".join(b.text for b in result.content if isinstance(b, TextContent))


def _jsonable(result: Any) -> Any:
    """What a tool answered, for the transcript: structured content when there is
    some, the text for a text-only answer, else the content blocks as JSON."""
    if not isinstance(result, ToolResult):
        return None
    if result.structured_content is not None:
        # FastMCP wraps a non-object return value as {"result": value}; report the value.
        if (result.meta or {}).get("fastmcp", {}).get("wrap_result"):
            return result.structured_content.get("result")
        return result.structured_content
    blocks = result.content
    texts = [b.text for b in blocks if isinstance(b, TextContent)]
    if blocks and len(texts) == len(blocks):
        return texts[0] if len(texts) == 1 else texts
    return [b.model_dump(mode="json", by_alias=True, exclude_none=True) for b in blocks]
