"""Issue 22: agent services at scale (the model proxy, the record of model calls).

    python -m bench agents_scale [--quick] [--repeats N]

- **proxy** (256 sessions, each with its own proxy and token, in a worker process,
  `bench/scale_worker.py`): the harnesses of all sessions run in another process
  (`bench.scale_procs load`: per session its own OpenAI SDK client, every session
  calling in a loop at once, 20 calls of a ~700-byte conversation each). Plain calls
  go to the product's scripted upstream in its own process (`python -m
  episodes.model.scripted`) with `model.token_data: true` (direct calls ask for the
  same token fields); streamed calls to a canned upstream (`bench.scale_procs
  upstream`, 183 chunks) through 256 more sessions. Each repeat runs the same calls
  straight to the upstream and through the proxies (order rotating): calls/s of both,
  and the worker's CPU per proxied call (plain) and per streamed chunk. With
  BENCH_PROXY_BASELINE=<another checkout>, a second worker runs that checkout's
  proxies and its calls join the rotation: the two measured side by side in one run.
- **density** (`bench.scale_density`): 1,000 live sessions with tools and a model
  (bridge + proxy) held by this process: RSS per session, and a probe agent turn's
  latency (an LLM harness making model and tool calls) beside an idle worker's.
- **record** (`bench.scale_record`): bytes an episode's record takes (history +
  stored payloads) at 200 model calls over 100, through a real dev server.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import math
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from bench.common import load, ratio, spread

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


@contextlib.asynccontextmanager
async def scripted_proc(policy: str) -> AsyncIterator[str]:
    """The product's scripted upstream, as its command line runs it."""
    proc = await asyncio.create_subprocess_exec(
        PY, "-m", "episodes.model.scripted", "--policy", policy,
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        yield (await asyncio.wait_for(proc.stdout.readline(), 60)).decode().strip()
    finally:
        proc.kill()
        await proc.wait()


@contextlib.asynccontextmanager
async def worker_proc(
    tree: str, sessions: int, base_url: str, stream_base_url: str
) -> AsyncIterator[Worker]:
    """`bench/scale_worker.py` with `episodes` from the checkout at `tree`."""
    env = {**os.environ, "PYTHONPATH": tree}
    proc = await asyncio.create_subprocess_exec(
        PY, str(Path(__file__).with_name("scale_worker.py")),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    worker = Worker(proc)
    try:
        ask = {
            "sessions": sessions,
            "base_url": base_url,
            "token_data": True,
            "stream_base_url": stream_base_url,
        }
        job = await worker.ask(json.dumps(ask), 300)
        worker.targets = [tuple(t) for t in job["targets"]]
        worker.stream_targets = [tuple(t) for t in job["stream_targets"]]
        yield worker
        worker.recorded = (await worker.ask("stop", 120))["recorded"]
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()


class Worker:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.targets: list[tuple[str, str]] = []
        self.stream_targets: list[tuple[str, str]] = []
        self.recorded = -1

    async def ask(self, line: str, timeout: float) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line.encode() + b"\n")
        await self.proc.stdin.drain()
        answer = await asyncio.wait_for(self.proc.stdout.readline(), timeout)
        if not answer:
            raise RuntimeError("the benchmark's worker process ended")
        return json.loads(answer)


async def drive_load(
    targets: list[tuple[str, str]], calls: int, stream: bool, worker: Worker | None
) -> dict[str, float]:
    """Run the harness side in its own process; its calls/s and the worker's CPU meanwhile.
    A direct call (no `worker`) asks for the token fields itself (the proxy adds them)."""
    direct = worker is None
    proc = await asyncio.create_subprocess_exec(
        PY, "-m", "bench.scale_procs", "load",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    try:
        job = {"targets": targets, "calls": calls, "stream": stream, "token_data": direct}
        proc.stdin.write((json.dumps(job) + "\n").encode())
        await proc.stdin.drain()
        line = await asyncio.wait_for(proc.stdout.readline(), 300)
        if line.strip() != b"ready":
            raise RuntimeError(f"load process: {line!r}")
        before = await worker.ask("cpu", 60) if worker else {"cpu_s": 0.0, "gc_s": 0.0}
        proc.stdin.write(b"go\n")
        await proc.stdin.drain()
        line = await asyncio.wait_for(proc.stdout.readline(), 600)
        after = await worker.ask("cpu", 60) if worker else before
        cpu = after["cpu_s"] - before["cpu_s"]
        gc_s = after.get("gc_s", 0.0) - before.get("gc_s", 0.0)
        out = json.loads(line)
        if out["errors"]:
            what = f"{'streamed' if stream else 'plain'} calls to {targets[0][0]}"
            raise RuntimeError(f"load process: {what} failed, e.g. {out['errors']}")
        return {
            "calls_per_s": out["calls"] / out["seconds"],
            "calls": out["calls"],
            "cpu_s": cpu,
            "gc_s": gc_s,
            "harness_cpu_ms_per_call": out["cpu_s"] / out["calls"] * 1e3,
        }
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()


async def proxy_scale(
    sessions: int, calls: int, stream_calls: int, repeats: int, chunks: int, baseline: str | None
) -> dict[str, list[float]]:
    """Raw figures of the proxy part (see the module doc): per repeat, the same calls
    straight to the upstream, through this checkout's proxies (`proxied`) and, with a
    `baseline` checkout, through its proxies (`baseline`), in rotating order."""
    raw: dict[str, list[float]] = {}
    here = os.environ.get("BENCH_PROXY_TREE") or str(Path(__file__).resolve().parent.parent)
    policy = os.environ.get("BENCH_PROXY_POLICY") or "kv"
    async with contextlib.AsyncExitStack() as stack:
        stream_url = await stack.enter_async_context(upstream_proc(chunks))
        base_url = await stack.enter_async_context(scripted_proc(policy))
        workers = {
            "proxied": await stack.enter_async_context(
                worker_proc(here, sessions, base_url, stream_url)
            )
        }
        if baseline:
            workers["baseline"] = await stack.enter_async_context(
                worker_proc(baseline, sessions, base_url, stream_url)
            )
        paths: list[tuple[str, Worker | None]] = [("direct", None), *workers.items()]
        for r in range(repeats):
            shift = r % len(paths)
            for path, worker in paths[shift:] + paths[:shift]:
                for stream, n in ((False, calls), (True, stream_calls)):
                    if n == 0:
                        continue
                    if worker is None:
                        targets = [(stream_url if stream else base_url, "none")] * sessions
                    else:
                        targets = worker.stream_targets if stream else worker.targets
                    res = await drive_load(targets, n, stream, worker)
                    key = f"{path}_{'stream' if stream else 'plain'}"
                    raw.setdefault(f"{key}_calls_per_s", []).append(res["calls_per_s"])
                    if worker is not None:
                        per_call = res["cpu_s"] / res["calls"]
                        raw.setdefault(f"{key}_cpu_ms_per_call", []).append(per_call * 1e3)
                        if os.environ.get("BENCH_GC_STATS"):
                            gc_ms = res["gc_s"] / res["calls"] * 1e3
                            raw.setdefault(f"{key}_gc_ms_per_call", []).append(gc_ms)
                        if stream:
                            raw.setdefault(f"{path}_cpu_us_per_chunk", []).append(
                                per_call / (chunks + 3) * 1e6
                            )
    kinds = (calls > 0) + (stream_calls > 0)  # each load warms every session with a call
    want = sessions * (repeats * (calls + stream_calls) + kinds * repeats)
    for path, worker in workers.items():
        if worker.recorded != want:
            raise RuntimeError(
                f"proxy scale ({path}): {worker.recorded} calls recorded, {want} made"
            )
    return raw


async def run(quick: bool = False, repeats: int | None = None) -> dict:
    """Environment knobs: BENCH_AGENTS_SCALE_PARTS (default `proxy,density,record`: the
    parts to run), BENCH_PROXY_BASELINE (a checkout, e.g. a worktree of main: its
    proxies measured beside this one's in the same run), BENCH_PROXY_TREE (the checkout
    measured instead of this one), BENCH_PROXY_SESSIONS, BENCH_PROXY_CALLS (`12,2`: plain
    and streamed calls per session and repeat; 0 skips one kind, for a profile),
    BENCH_GC_STATS=1 (the worker's garbage-collection time per call, at ~1 us of CPU
    per collection), BENCH_PROXY_POLICY (the scripted upstream's `--policy`, default
    `kv`: a one-word answer to a conversation without tools; `echo` answers with the
    user's ~100 words, each with its token data)."""
    repeats = repeats or (1 if quick else 3)
    parts = os.environ.get("BENCH_AGENTS_SCALE_PARTS", "proxy,density,record").split(",")
    baseline = os.environ.get("BENCH_PROXY_BASELINE") or None
    sessions = int(os.environ.get("BENCH_PROXY_SESSIONS") or (16 if quick else 256))
    calls, stream_calls, chunks = (4, 1, 180) if quick else (20, 2, 180)
    if os.environ.get("BENCH_PROXY_CALLS"):  # "plain,streamed" per session and repeat
        calls, stream_calls = map(int, os.environ["BENCH_PROXY_CALLS"].split(","))
    load_start = load()
    result: dict[str, Any] = {"figures": {}, "ratios": {}, "parts": parts}
    if "proxy" in parts:
        raw = await proxy_scale(sessions, calls, stream_calls, repeats, chunks, baseline)
        figures: dict[str, Any] = {k: spread(v) for k, v in raw.items()}
        med: dict[str, float] = collections.defaultdict(lambda: math.nan)  # a kind skipped
        med.update({k: v["median"] for k, v in figures.items()})
        result["figures"].update(
            {
                "sessions": sessions,
                "proxy_cpu_ms_per_call": med["proxied_plain_cpu_ms_per_call"],
                "proxy_cpu_us_per_chunk": med["proxied_cpu_us_per_chunk"],
                "proxy_cpu_ms_per_streamed_call": med["proxied_stream_cpu_ms_per_call"],
                "chunks_per_streamed_call": chunks + 3,
            }
        )
        ratios = result["ratios"]
        for path in ("proxied", "baseline") if baseline else ("proxied",):
            name = "" if path == "proxied" else "baseline_"
            ratios[f"{name}proxied_vs_direct_calls_per_s"] = ratio(
                med[f"{path}_plain_calls_per_s"], med["direct_plain_calls_per_s"]
            )
            ratios[f"{name}proxied_vs_direct_streamed_calls_per_s"] = ratio(
                med[f"{path}_stream_calls_per_s"], med["direct_stream_calls_per_s"]
            )
        if baseline:
            result["baseline"] = baseline
            ratios["cpu_per_call_vs_baseline"] = ratio(
                med["proxied_plain_cpu_ms_per_call"], med["baseline_plain_cpu_ms_per_call"]
            )
            ratios["cpu_per_chunk_vs_baseline"] = ratio(
                med["proxied_cpu_us_per_chunk"], med["baseline_cpu_us_per_chunk"]
            )
        result["spread"] = figures
        result["raw"] = raw  # every repeat's figure, in the order run
        print(f"agents_scale: {sessions} sessions, {repeats} repeat(s), load {load_start:.2f}")
        for k, v in figures.items():
            print(f"  {k}: {v['median']:.3f} [{v['min']:.3f}..{v['max']:.3f}]")
        for k, v in ratios.items():
            print(f"  {k}: {v:.2f}x")
    from bench import scale_density, scale_record

    if "density" in parts:
        dens = await scale_density.run(quick=quick)
        result["figures"].update(dens["figures"])
        result["ratios"].update(dens["ratios"])
    if "record" in parts:
        rec = await scale_record.run(quick=quick, repeats=repeats)
        result["figures"].update(rec["figures"])
        result["ratios"].update(rec["ratios"])
    result["load"] = [load_start, load()]
    return result


if __name__ == "__main__":
    asyncio.run(run(quick="--quick" in sys.argv[1:]))
