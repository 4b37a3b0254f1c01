"""1,000 live sessions with tools and a model (bridge + proxy) held by one process.

Part of `bench.agents_scale`. This process plays the worker: it starts N sessions'
agent services (`AgentServices`: the env's tools over the MCP bridge, the model proxy)
and holds them; RSS per session is this process's RSS with them live minus before,
over N. The harnesses are other processes and are not counted (see `bench.density`
for them). Beside it: a probe agent turn (`LiveSession`, the reference LLM harness,
a scripted kv upstream: three model calls and two tool calls) on an idle worker,
then with the N sessions live.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import statistics
import sys
import time
from typing import Any

import psutil

from bench.common import ratio
from episodes.model.scripted.server import ScriptedUpstream, kv_policy
from episodes.runtimes.subprocess import SubprocessRuntime
from episodes.session.live import LiveSession
from episodes.session.services import AgentServices
from episodes.types.model import ModelSpec
from episodes.types.spec import parse_spec

MIB = 1024 * 1024


def put(key: str, value: str) -> str:
    """Store a value."""
    return f"stored {key!r}"


def _rss() -> int:
    gc.collect()
    return psutil.Process().memory_info().rss


async def _probe(base_url: str, n: int) -> list[float]:
    """ms of turn 0 of `n` kv-agent sessions, one after the other."""
    spec = parse_spec(
        {
            "name": "probe",
            "env": "kv-store",
            "tasks": [{"id": "ab", "data": {"goal": {"a": "1", "b": "2"}}}],
            "max_turns": 1,
            "harness": {"command": "{python} -m episodes.harness.reference.llm --max-steps 8"},
            "model": {"base_url": base_url, "model": "scripted"},
        }
    )
    out = []
    for i in range(n):
        session = LiveSession(spec, spec.tasks[0], 0, f"probe-{i}")
        try:
            await session.open()
            t0 = time.perf_counter()
            result = await session.turn(0)
            out.append((time.perf_counter() - t0) * 1000)
            if result.termination != "env_done":
                raise RuntimeError(f"probe turn ended {result.termination}: {result.record.error}")
        finally:
            await session.close()
    return out


async def _hold(live: list[AgentServices]) -> asyncio.subprocess.Process:
    """Connect a live harness to every session (`bench.scale_procs hold`); the process."""
    targets = []
    for s in live:
        env = s.harness_env
        keys = ("EPISODES_MCP_URL", "EPISODES_MCP_TOKEN", "OPENAI_BASE_URL", "OPENAI_API_KEY")
        targets.append([env[k] for k in keys])
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.scale_procs", "hold",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write((json.dumps({"targets": targets}) + "\n").encode())
    await proc.stdin.drain()
    line = await asyncio.wait_for(proc.stdout.readline(), 600)
    out = json.loads(line)
    if out["ready"] != len(live):
        proc.kill()
        raise RuntimeError(f"density: {out['ready']} of {len(live)} harnesses connected: {out}")
    await asyncio.sleep(1)  # let the sessions' allocations settle
    return proc


async def run(quick: bool = False) -> dict[str, Any]:
    sessions = 50 if quick else 1000
    probes = 3 if quick else 7
    async with ScriptedUpstream(policy=kv_policy) as upstream:
        model = ModelSpec(base_url=upstream.base_url, model="scripted")
        runtime = SubprocessRuntime()
        await runtime.start()
        live: list[AgentServices] = []
        holder = None
        try:
            await _probe(upstream.base_url, 1)  # warm: imports, the harness's first start
            idle = await _probe(upstream.base_url, probes)
            rss0 = _rss()
            t0 = time.perf_counter()
            for i in range(sessions):
                services = AgentServices([put], model, session_id=f"dense-{i}")
                live.append(services)
                await services.start(runtime)
            start_s = time.perf_counter() - t0
            rss_idle = _rss()
            holder = await _hold(live)
            rss1 = _rss()
            dense = await _probe(upstream.base_url, probes)
        finally:
            if holder is not None:
                assert holder.stdin is not None
                holder.stdin.write(b"done\n")
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(holder.wait(), 60)
                if holder.returncode is None:
                    holder.kill()
                    await holder.wait()
            t1 = time.perf_counter()
            for services in live:
                await services.stop()
            stop_s = time.perf_counter() - t1
            await runtime.stop()
    per = (rss1 - rss0) / sessions / MIB
    per_idle = (rss_idle - rss0) / sessions / MIB
    idle_ms, dense_ms = statistics.median(idle), statistics.median(dense)
    print(
        f"  density: {sessions} sessions with tools + model, each harness connected: RSS "
        f"{rss0 / MIB:.0f} -> {rss1 / MIB:.0f} MiB = {per:.3f} MiB each ({per_idle:.3f} "
        "before the harnesses connected); "
        f"start {start_s / sessions * 1000:.1f} ms, stop {stop_s / sessions * 1000:.1f} ms each; "
        f"probe turn {idle_ms:.0f} ms idle, {dense_ms:.0f} ms dense (load {os.getloadavg()[0]:.2f})"
    )
    return {
        "figures": {
            "density_sessions": sessions,
            "rss_mib_per_agent_session": per,
            "rss_mib_per_agent_session_unconnected": per_idle,
            "agent_session_start_ms": start_s / sessions * 1000,
            "agent_session_stop_ms": stop_s / sessions * 1000,
            "probe_turn_ms_idle_worker": idle_ms,
            "probe_turn_ms_dense_worker": dense_ms,
            "probe_turn_ms": {"idle": idle, "dense": dense},
        },
        "ratios": {"probe_turn_dense_vs_idle": ratio(dense_ms, idle_ms)},
    }
