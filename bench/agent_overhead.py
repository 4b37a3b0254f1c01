"""What the agent services add: per tool call, per model call, and per session.

- **bridge, per call**: an MCP `call_tool` through the session's ToolBridge (bearer
  check, call recording) vs the same tool on a bare FastMCP server over the same
  transport (streamable HTTP on loopback, same client), alternating;
- **proxy, per call**: `bench.proxy_overhead` (through the proxy vs straight to the
  upstream);
- **tunnel, per call**: the same bridge reached through the stdio tunnel that Modal
  and Prime boxes use (its in-box end as a local process here, so this is the
  tunnel's own cost, without a remote exec channel's latency);
- **per session**: starting and stopping the bridge and the proxy (what a session
  with tools and a model pays once, before its harness starts).

A turn that makes k tool calls and m model calls pays about k x bridge + m x proxy.

    python -m bench.agent_overhead [--quick]
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator

import uvicorn
from fastmcp import FastMCP

from bench import proxy_overhead
from bench.common import fmt_spread, ratio, spread, summary, table
from episodes.model.scripted.server import ScriptedUpstream, echo_policy
from episodes.net import tcp_listener
from episodes.runtimes.subprocess import SubprocessRuntime
from episodes.session.services import AgentServices
from episodes.tools.bridge import MCP_PATH
from episodes.tunnel.stdio import StdioTunnel
from episodes.types.model import ModelSpec


def put(key: str, value: str) -> str:
    """Store a value."""
    return f"stored {key!r}"


@contextlib.asynccontextmanager
async def bare_server() -> AsyncIterator[str]:
    """The same tool on FastMCP with nothing of ours: no token, no recording."""
    server = FastMCP("bare")
    server.tool(put, run_in_thread=False)
    sock = tcp_listener()
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        server.http_app(path="/mcp", transport="http"), log_config=None, access_log=False
    )
    srv = uvicorn.Server(config)
    srv.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    task = asyncio.create_task(srv.serve(sockets=[sock]))
    while not srv.started:
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        srv.should_exit = True
        await task


@contextlib.asynccontextmanager
async def mcp_client(url: str, token: str | None) -> AsyncIterator[object]:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=10) as http,
        Client(streamable_http_client(url, http_client=http), cache=None) as client,
    ):
        yield client


async def _tool_ms(client: object) -> float:
    t0 = time.perf_counter()
    await client.call_tool("put", {"key": "k", "value": "v"})  # type: ignore[attr-defined]
    return (time.perf_counter() - t0) * 1000


async def run(quick: bool = False, repeats: int | None = None) -> dict:
    calls = 20 if quick else 200
    repeats = repeats or (1 if quick else 3)
    tool: dict[str, dict[str, list[float]]] = {"bare": {}, "bridge": {}, "tunnel": {}}
    sessions: list[float] = []
    async with ScriptedUpstream(policy=echo_policy) as upstream:
        model = ModelSpec(base_url=upstream.base_url, model="m")
        runtime = SubprocessRuntime()
        await runtime.start()
        try:
            # Per session: bridge + proxy up, then down (what a session pays once).
            for _ in range(5 if quick else 20):
                services = AgentServices([put], model, session_id="bench")
                t0 = time.perf_counter()
                env = await services.start(runtime)
                await services.stop()
                sessions.append((time.perf_counter() - t0) * 1000)
            services = AgentServices([put], None, session_id="bench")
            env = await services.start(runtime)
            assert services.bridge is not None and services.bridge.port is not None
            tunnel = StdioTunnel({"mcp": ("127.0.0.1", services.bridge.port)})
            tunnelled = f"http://127.0.0.1:{(await tunnel.start(runtime))['mcp']}{MCP_PATH}"
            token = env["EPISODES_MCP_TOKEN"]
            try:
                async with (
                    bare_server() as bare_url,
                    mcp_client(bare_url, None) as bare,
                    mcp_client(env["EPISODES_MCP_URL"], token) as ours,
                    mcp_client(tunnelled, token) as through,
                ):
                    clients = {"bare": bare, "bridge": ours, "tunnel": through}
                    for c in clients.values():
                        await _tool_ms(c)  # warm-up
                    for _ in range(repeats):
                        ms: dict[str, list[float]] = {p: [] for p in clients}
                        for _ in range(calls):
                            for path, c in clients.items():
                                ms[path].append(await _tool_ms(c))
                        for path, values in ms.items():
                            s = summary(values)
                            tool[path].setdefault("median", []).append(s["median"])
                            tool[path].setdefault("p95", []).append(s["p95"])
            finally:
                await tunnel.stop()
                await services.stop()
        finally:
            await runtime.stop()
    figures = {name: {k: spread(v) for k, v in row.items()} for name, row in tool.items()}
    bridge_ms = figures["bridge"]["median"]["median"] - figures["bare"]["median"]["median"]
    tunnel_ms = figures["tunnel"]["median"]["median"] - figures["bridge"]["median"]["median"]
    session = summary(sessions)
    print(f"bridge overhead: {calls} tool calls per path, {repeats} repeat(s), median [min..max]")
    print(
        table(
            [
                [n, fmt_spread(f["median"], " ms"), fmt_spread(f["p95"], " ms")]
                for n, f in figures.items()
            ],
            ["path", "per-call median", "per-call p95"],
        )
    )
    ratio_ = ratio(figures["bridge"]["median"]["median"], figures["bare"]["median"]["median"])
    print(f"  bridge adds {bridge_ms:.2f} ms per tool call ({ratio_:.2f}x a bare FastMCP server)")
    print(f"  the stdio tunnel adds {tunnel_ms:.2f} ms per tool call (Modal/Prime path)")
    print(f"  bridge + proxy start and stop per session: median {session['median']:.1f} ms")
    proxy = await proxy_overhead.run(quick=quick, repeats=repeats)
    return {
        "calls": calls,
        "repeats": repeats,
        "figures": {"tool_call": figures, "session_start_stop_ms": session},
        "overhead_ms": {
            "tool_call": bridge_ms,
            "tool_call_tunnel": tunnel_ms,
            **{f"model_{k}": v for k, v in proxy["overhead_ms"].items()},
        },
        "ratios": {
            "tool_call_vs_bare": ratio_,
            **{f"model_{k}": v for k, v in proxy["ratios"].items()},
        },
        "proxy": proxy,
    }


if __name__ == "__main__":
    asyncio.run(run(quick="--quick" in sys.argv[1:]))
