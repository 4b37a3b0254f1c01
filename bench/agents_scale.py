"""Issue 22: agent services at scale (the model proxy, the record of model calls).

    python -m bench agents_scale [--quick] [--repeats N]

- **proxy** (256 sessions, each with its own proxy and token, in this process = the
  worker): the harnesses of all sessions run in another process (`bench.scale_procs
  load`, the OpenAI SDK, every session calling in a loop at once) against a fast canned
  upstream in a third process (`bench.scale_procs upstream`). Each repeat runs the same
  calls straight to the upstream and through the proxies (order alternating): calls/s
  of both, and this process's CPU per proxied call (plain) and per streamed chunk.
- **density** (`bench.scale_density`): 1,000 live sessions with tools and a model
  (bridge + proxy) held by this process: RSS per session, and a probe agent turn's
  latency (an LLM harness making model and tool calls) beside an idle worker's.
- **record** (`bench.scale_record`): bytes an episode's record takes (history +
  stored payloads) at 200 model calls over 100, through a real dev server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

from bench.common import load, ratio, spread
from episodes.agents.services import AgentServices
from episodes.runtimes.subprocess import SubprocessRuntime
from episodes.types.model import ModelSpec

PY = sys.executable


@contextlib.asynccontextmanager
async def upstream_proc(chunks: int) -> AsyncIterator[str]:
    proc = await asyncio.create_subprocess_exec(
        PY, "-m", "bench.scale_procs", "upstream", "--chunks", str(chunks),
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        port = int((await asyncio.wait_for(proc.stdout.readline(), 60)).decode())
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.kill()
        await proc.wait()


async def drive_load(targets: list[tuple[str, str]], calls: int, stream: bool) -> dict[str, float]:
    """Run the harness side in its own process; its calls/s and this process's CPU meanwhile."""
    proc = await asyncio.create_subprocess_exec(
        PY, "-m", "bench.scale_procs", "load",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    try:
        job = {"targets": targets, "calls": calls, "stream": stream}
        proc.stdin.write((json.dumps(job) + "\n").encode())
        await proc.stdin.drain()
        line = await asyncio.wait_for(proc.stdout.readline(), 300)
        if line.strip() != b"ready":
            raise RuntimeError(f"load process: {line!r}")
        cpu0 = time.process_time()
        proc.stdin.write(b"go\n")
        await proc.stdin.drain()
        line = await asyncio.wait_for(proc.stdout.readline(), 600)
        cpu = time.process_time() - cpu0
        out = json.loads(line)
        if out["errors"]:
            raise RuntimeError(f"load process: calls failed, e.g. {out['errors']}")
        return {
            "calls_per_s": out["calls"] / out["seconds"],
            "calls": out["calls"],
            "cpu_s": cpu,
            "harness_cpu_ms_per_call": out["cpu_s"] / out["calls"] * 1e3,
        }
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()


async def proxy_scale(sessions: int, calls: int, stream_calls: int, repeats: int, chunks: int):
    """(figures, raw) of the proxy part: see the module doc."""
    raw: dict[str, list[float]] = {}
    recorded: list[list[Any]] = []
    async with upstream_proc(chunks) as base_url:
        spec = ModelSpec(base_url=base_url, model="m")
        runtime = SubprocessRuntime()
        await runtime.start()
        services = [AgentServices(None, spec, session_id=f"s{i}") for i in range(sessions)]
        try:
            for s in services:
                await s.start(runtime)
                recorded.append([])
                s.begin_turn(recorded[-1])
            proxied = [
                (s.harness_env["OPENAI_BASE_URL"], s.harness_env["OPENAI_API_KEY"])
                for s in services
            ]
            direct = [(base_url, "none")] * sessions
            for r in range(repeats):
                order = [("direct", direct), ("proxied", proxied)]
                for path, targets in order if r % 2 == 0 else order[::-1]:
                    for stream, n in ((False, calls), (True, stream_calls)):
                        res = await drive_load(targets, n, stream)
                        key = f"{path}_{'stream' if stream else 'plain'}"
                        raw.setdefault(f"{key}_calls_per_s", []).append(res["calls_per_s"])
                        if path == "proxied":
                            per_call = res["cpu_s"] / res["calls"]
                            raw.setdefault(f"{key}_cpu_ms_per_call", []).append(per_call * 1e3)
                            if stream:
                                raw.setdefault("cpu_us_per_chunk", []).append(
                                    per_call / (chunks + 3) * 1e6
                                )
        finally:
            for s in services:
                await s.stop()
            await runtime.stop()
    got = sum(len(r) for r in recorded)
    want = sessions * (repeats * (calls + stream_calls) + 2 * repeats)
    if got != want:
        raise RuntimeError(f"proxy scale: {got} calls recorded, {want} made")
    return raw


async def run(quick: bool = False, repeats: int | None = None) -> dict:
    repeats = repeats or (1 if quick else 3)
    sessions = 16 if quick else 256
    calls, stream_calls, chunks = (4, 1, 180) if quick else (12, 2, 180)
    load_start = load()
    raw = await proxy_scale(sessions, calls, stream_calls, repeats, chunks)
    figures: dict[str, Any] = {k: spread(v) for k, v in raw.items()}
    med = {k: v["median"] for k, v in figures.items()}
    out_figures = {
        "sessions": sessions,
        "proxy_cpu_ms_per_call": med["proxied_plain_cpu_ms_per_call"],
        "proxy_cpu_us_per_chunk": med["cpu_us_per_chunk"],
        "proxy_cpu_ms_per_streamed_call": med["proxied_stream_cpu_ms_per_call"],
        "chunks_per_streamed_call": chunks + 3,
    }
    ratios = {
        "proxied_vs_direct_calls_per_s": ratio(
            med["proxied_plain_calls_per_s"], med["direct_plain_calls_per_s"]
        ),
        "proxied_vs_direct_streamed_calls_per_s": ratio(
            med["proxied_stream_calls_per_s"], med["direct_stream_calls_per_s"]
        ),
    }
    print(f"agents_scale: {sessions} sessions, {repeats} repeat(s), load {load_start:.2f}")
    for k, v in figures.items():
        print(f"  {k}: {v['median']:.3f} [{v['min']:.3f}..{v['max']:.3f}]")
    for k, v in ratios.items():
        print(f"  {k}: {v:.2f}x")
    result: dict[str, Any] = {"figures": out_figures, "ratios": ratios, "spread": figures}
    from bench import scale_density, scale_record

    dens = await scale_density.run(quick=quick)
    result["figures"].update(dens["figures"])
    result["ratios"].update(dens["ratios"])
    rec = await scale_record.run(quick=quick, repeats=repeats)
    result["figures"].update(rec["figures"])
    result["ratios"].update(rec["ratios"])
    result["load"] = [load_start, load()]
    return result


if __name__ == "__main__":
    asyncio.run(run(quick="--quick" in sys.argv[1:]))
