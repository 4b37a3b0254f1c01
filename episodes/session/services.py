"""One session's agent services: the env's tools over MCP and the model proxy.

`LiveSession` starts them before the harness (the harness may list tools or call the
model at start), hands the harness their addresses and tokens, and stops them with
the session. Every call they serve is an event of the turn in progress, in the order
it happened among the harness's own events.

Reaching them from the box:
- a runtime that shares the worker's loopback (subprocess) uses the loopback URLs;
- a box without a network (Docker, `network: none`) gets a private per-box host
  directory bind-mounted in (`Runtime.channel_dir`); the services listen on Unix
  sockets there and a stdlib relay inside the box (`episodes/tunnel/relay.py`) turns
  each socket into a loopback port of the box. The bearer tokens still guard both;
- other boxes (Modal, Prime) run on another machine and share nothing with the
  worker but processes' stdio: a stdio tunnel (`episodes/tunnel/stdio.py`) runs a
  stdlib program in the box that serves each service on the box's loopback and
  carries its connections over its own stdin/stdout to the worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any, ClassVar

from episodes.errors import HarnessStartFailed, ModelError, SpecError
from episodes.harness.budget import BudgetExceeded, StreamBudget
from episodes.json_depth import text_too_deep
from episodes.runtimes.base import Runtime, RuntimeProcess
from episodes.traces import OFF, Span, call_span
from episodes.truncate import json_size
from episodes.tunnel.relay import RELAY_IN_BOX
from episodes.types.model import ModelSpec

if TYPE_CHECKING:
    from episodes.model.proxy import ModelProxy
    from episodes.replay import Replay
    from episodes.tools.bridge import ToolBridge

log = logging.getLogger(__name__)

RELAY_READY_TIMEOUT_S = 20.0


class AgentServices:
    """The tool bridge and the model proxy of one session (either may be absent)."""

    # An optional process-wide hook told of every call served (the worker's metrics
    # count them by kind); it must be quick and never fails a call.
    observer: ClassVar[Callable[[dict[str, Any]], None] | None] = None

    def __init__(
        self,
        tools: Any,
        model: ModelSpec | None,
        *,
        session_id: str,
        budget: StreamBudget | None = None,
        on_breach: Callable[[], None] | None = None,
    ) -> None:
        """`budget`: the session's (shared with its driver), charged for every call;
        past it `breach` says why and `on_breach` is called, once (it stops the harness)."""
        self.session_id = session_id
        self.budget = budget or StreamBudget()
        self.on_breach = on_breach
        self.breach: str | None = None
        self._tools = tools
        self._model = model
        self.bridge: ToolBridge | None = None
        self.proxy: ModelProxy | None = None
        self._stack = AsyncExitStack()
        self._relays: list[RuntimeProcess] = []
        # The turn in progress collects calls here; between turns they wait for the next.
        self._sink: list[Any] | None = None
        self._between: list[Any] = []
        self._recorded = True
        self._failure: ModelError | None = None
        # The span of the turn in progress, when traced: each call recorded is written
        # under it (`episodes.traces`); OFF between turns and while a restore replays.
        self.trace: Span = OFF
        self.harness_env: dict[str, str] = {}
        self.mcp_url: str | None = None  # as the harness reaches it (ACP's session/new)

    @property
    def wanted(self) -> bool:
        return bool(self._tools) or self._model is not None

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self, runtime: Runtime) -> dict[str, str]:
        """Start what the episode needs, reachable from `runtime`: the harness's variables."""
        if not self.wanted:
            return {}
        # Imported here: sessions without tools or a model never load the servers.
        from episodes.model.proxy import ModelProxy
        from episodes.tools.bridge import ToolBridge

        local = runtime.shares_host_loopback
        channel = None if local else runtime.channel_dir
        try:
            if self._tools:
                sock = str(channel[0] / "mcp.sock") if channel else False
                self.bridge = ToolBridge(
                    self._tools, on_call=self._record, unix_socket=sock, budget=self.budget
                )
                await self._stack.enter_async_context(self.bridge)
                self.mcp_url = self.bridge.url
                self.harness_env.update(self.bridge.env())
            if self._model is not None:
                uds = str(channel[0] / "model.sock") if channel else None
                self.proxy = ModelProxy(
                    self._model,
                    on_call=self._record,
                    on_failure=self._failed,
                    uds_path=uds,
                    session_id=self.session_id,
                    budget=self.budget,
                )
                await self._stack.enter_async_context(self.proxy)
                self.harness_env.update(self.proxy.env())
            if channel:
                self._point_at_box(await self._relays_for(runtime, channel[1]))
            elif not local:
                self._point_at_box(await self._tunnel(runtime))
        except ModelError as e:
            await self.stop()
            # The worker lacks what the spec names (the upstream key's variable): a
            # configuration error, not something a retry on this worker fixes.
            raise SpecError(f"model: {e}") from None
        except BaseException:
            await self.stop()
            raise
        return dict(self.harness_env)

    async def stop(self) -> None:
        """Stop the relays, the bridge and the proxy. Idempotent; finishes if cancelled."""
        relays, self._relays = self._relays, []
        for relay in relays:
            with contextlib.suppress(Exception):
                await relay.kill()
        await asyncio.shield(self._stack.aclose())

    def _served(self) -> dict[str, ToolBridge | ModelProxy]:
        """The services this session serves, by the names the box-side ends use."""
        served = {"mcp": self.bridge, "model": self.proxy}
        return {name: service for name, service in served.items() if service is not None}

    def _point_at_box(self, ports: dict[str, int]) -> None:
        """The harness's variables, rewritten to the box-loopback ports that reach the
        services (a relay's or the tunnel's)."""
        from episodes.tools.bridge import MCP_PATH

        if self.bridge is not None:
            self.mcp_url = f"http://127.0.0.1:{ports['mcp']}{MCP_PATH}"
            self.harness_env.update(self.bridge.env(url=self.mcp_url))
        if self.proxy is not None:
            self.harness_env["OPENAI_BASE_URL"] = f"http://127.0.0.1:{ports['model']}/v1"

    async def _relays_for(self, runtime: Runtime, dir_in_box: str) -> dict[str, int]:
        """A box with the channel directory: one in-box relay per socket, started
        together (each is an exec into the box: ~0.7 s on Docker)."""
        names = list(self._served())
        try:
            async with asyncio.TaskGroup() as group:
                tasks = [
                    group.create_task(self._relay(runtime, f"{dir_in_box}/{n}.sock")) for n in names
                ]
        except BaseExceptionGroup as failed:  # the first relay's own error, as one line
            raise failed.exceptions[0] from None
        return {name: task.result() for name, task in zip(names, tasks, strict=True)}

    async def _tunnel(self, runtime: Runtime) -> dict[str, int]:
        """A box on another machine: the services through one stdio tunnel."""
        from episodes.tunnel.stdio import StdioTunnel

        # Both services listen on the worker's loopback (also when tunnelled).
        tunnel = StdioTunnel(
            {n: ("127.0.0.1", _port(v)) for n, v in self._served().items()},
            max_connections=self.budget.limits.connections,
            on_fault=self.breached,
        )
        self._stack.push_async_callback(tunnel.stop)
        return await tunnel.start(runtime)

    async def _relay(self, runtime: Runtime, socket_in_box: str) -> int:
        """Start the in-box relay for one socket; the box's loopback port it listens on."""
        relay = RELAY_IN_BOX.replace("/opt/episodes", runtime.box_episodes, 1)
        proc = await runtime.open_relay(
            [runtime.box_python, "-I", relay, "--socket", socket_in_box]
        )
        self._relays.append(proc)
        try:
            line = await asyncio.wait_for(_first_line(proc), RELAY_READY_TIMEOUT_S)
            return int(json.loads(line)["port"])
        except (TimeoutError, ValueError, KeyError, TypeError):
            raise await _relay_missing(runtime, proc) from None

    # -- turns ---------------------------------------------------------------------------

    def begin_turn(self, events: list[Any], *, recorded: bool = True) -> None:
        """Calls from now on are events of this turn (calls made between turns come first).

        `recorded=False`: the turn's events will not be kept (a restore replaying recorded
        turns); later model calls must then not be recorded as extending its calls."""
        events.extend(self._between)
        self._between = []
        self._sink = events
        self._failure = None
        self._recorded = recorded

    def end_turn(self) -> ModelError | None:
        """Stop collecting; the model failure of this turn, if the proxy gave up on a call."""
        self._sink = None
        self.trace = OFF
        if not self._recorded:
            self._forget_calls()
            self._recorded = True
        failure, self._failure = self._failure, None
        return failure

    def replay(self, replay: Replay | None) -> None:
        """Answer the harness's calls from `replay` (None: live again), both services."""
        if self.proxy is not None:
            self.proxy.replay = replay
        if self.bridge is not None:
            self.bridge.replay = replay

    def _forget_calls(self) -> None:
        if self.proxy is not None:
            self.proxy.conversations.forget()

    def _record(self, event: dict[str, Any]) -> None:
        if AgentServices.observer is not None:
            try:
                AgentServices.observer(event)
            except Exception:
                log.exception("AgentServices.observer failed")
        if self.breach is not None:
            self._forget_calls()
            return  # not kept: the session ends at this turn anyway
        try:
            # As recorded (request and response included): what the worker holds for it.
            self.budget.charge(json_size(event))
        except BudgetExceeded as e:
            self._forget_calls()
            self.breached(e.detail)
            return
        (self._sink if self._sink is not None else self._between).append(event)
        if self.trace is not OFF and self._recorded:
            call_span(self.trace, event, session_id=self.session_id)

    def breached(self, why: str) -> None:
        """The harness broke the protocol outside its driver's stream (a budget, the
        tunnel): the first reason is kept, and the harness is stopped."""
        if self.breach is None:
            self.breach = why
            if self.on_breach is not None:
                self.on_breach()

    def _failed(self, error: ModelError) -> None:
        self._failure = self._failure or error


async def _relay_missing(runtime: Runtime, proc: RuntimeProcess) -> HarnessStartFailed:
    """The relay did not say it listens: the box's image is not one of ours (no python3,
    or no relay at RELAY_IN_BOX). A spec error, named as the episode's outcome: another
    attempt on the same image fails the same way, so it is not retried."""
    why = ""
    with contextlib.suppress(Exception):
        # Bounded: what the failed exec said (e.g. "python3: not found"), on one line.
        data = await asyncio.wait_for(proc.stderr.read(2000), 2)
        why = " ".join(data.decode("utf-8", errors="replace").split())[-200:]
    image = getattr(getattr(runtime, "config", None), "image", None)
    return HarnessStartFailed(
        f"harness.runtime.image {image or '(the box)'!r} cannot run the in-box relay that "
        f"connects the harness to the session's tools and model ({why or 'no output'}): "
        f"it needs python3 on the PATH and {RELAY_IN_BOX}; use an image built by "
        "scripts/build-image.sh, or one made FROM it, or any other image with the runtime "
        "bundle (runtime_bundle, made from that script's image: docs/runtimes.md)"
    )


async def _first_line(proc: RuntimeProcess) -> str:
    data = b""
    # Bounded: the relay's line is ~100 bytes; a box that sends more is not running it.
    while b"\n" not in data and len(data) < 64 * 1024:
        chunk = await proc.stdout.read(4096)
        if not chunk:
            break
        data += chunk
    line = data.split(b"\n", 1)[0]
    return "" if text_too_deep(line) else line.decode("utf-8", errors="replace")


def _port(service: ToolBridge | ModelProxy) -> int:
    assert service.port is not None, "started before this"
    return service.port
