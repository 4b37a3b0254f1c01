"""Warm pools (issue 44 §1): a claim from a warm pool beside a cold start, and a batch of
short episodes with and without warm boxes, side by side in one run, on Docker.

- box: `WarmPool.claim()` of a ready box (its `alive()` check included) vs a Docker
  box started cold (`make_runtime(config).start()`: a container on this engine);
- batch: `EPISODES` 2-turn echo episodes in Docker boxes, `CONCURRENCY` at a time,
  through a dev server and one worker, once with `pool.warm: 0` and once with
  `pool.warm: CONCURRENCY` (the first wave of the warm run starts cold, then claims);
  episodes/s from the first start to the last result, and each episode's median
  duration (its provision included).

Skipped (with the reason) without a Docker engine and the image `episodes-harness:latest`.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
import uuid

from bench.common import dev_server, fmt_spread, load, ratio, running, spread, table
from bench.pool import BOX_ECHO, docker_skip_reason
from episodes.client import EpisodesClient
from episodes.client.connect import connect
from episodes.runtimes import make_runtime
from episodes.runtimes.pool.warm import WarmPool
from episodes.types.runtime import DockerConfig
from episodes.types.spec import parse_spec
from workers.worker import EpisodeWorker, WorkerOptions

EPISODES = int(os.environ.get("BENCH_WARM_EPISODES", "48"))
CONCURRENCY = int(os.environ.get("BENCH_WARM_CONCURRENCY", "8"))
TURNS = 2


async def _cold_ms(config: DockerConfig) -> float:
    runtime = make_runtime(config, labels={"bench": "warm"})
    t0 = time.perf_counter()
    try:
        await runtime.start()
        return (time.perf_counter() - t0) * 1000
    finally:
        await runtime.stop()


async def _claim_ms(pool: WarmPool) -> float:
    while pool.stats.ready < 1:  # the claim measured is of a ready box, as in steady state
        await asyncio.sleep(0.05)
    t0 = time.perf_counter()
    runtime = await pool.claim()
    took = (time.perf_counter() - t0) * 1000
    assert runtime is not None
    await runtime.stop()
    return took


async def _boxes(config: DockerConfig, repeats: int) -> dict:
    cold = [await _cold_ms(config) for _ in range(repeats)]
    pool = WarmPool(config, 2, labels={"bench": "warm"})
    try:
        await pool.claim()  # the first demand starts the filling
        claims = [await _claim_ms(pool) for _ in range(repeats)]
    finally:
        await pool.close()
    return {"cold_start_ms": spread(cold), "claim_ms": spread(claims)}


def _spec(warm: int) -> object:
    return parse_spec(
        {
            "name": f"warm{warm}-{uuid.uuid4().hex[:6]}",
            "env": "script",
            "tasks": [
                {"id": f"t{i}", "data": {"messages": [f"m{j}" for j in range(TURNS)]}}
                for i in range(EPISODES)
            ],
            "harness": {
                "command": BOX_ECHO,
                "runtime": DockerConfig().model_dump(),
                "ready_timeout_s": 120,
                "stop_timeout_s": 2,
            },
            "pool": {"warm": warm},
            "max_turns": TURNS,
            "turn_timeout_s": 120,
            "worker_lost_timeout_s": 60,
        }
    )


async def _batch(client, queue: str, warm: int) -> dict:  # type: ignore[no-untyped-def]
    spec = _spec(warm)
    ec = EpisodesClient(client, task_queue=queue)
    t0 = time.perf_counter()
    results = [r async for r in ec.run_batch(spec, concurrency=CONCURRENCY)]  # type: ignore[arg-type]
    wall = time.perf_counter() - t0
    bad = [r.termination for r in results if r.termination != "env_done"]
    return {
        "episodes": len(results),
        "failed": len(bad),
        "wall_s": round(wall, 2),
        "episodes_per_s": round(len(results) / wall, 2),
        "median_episode_s": round(statistics.median(r.duration_s for r in results), 3)
        if results
        else None,
    }


async def _batches(repeats: int) -> tuple[dict, dict]:
    queue = f"bench-warm-{uuid.uuid4().hex[:6]}"
    out: dict[str, list[dict]] = {"cold": [], "warm": []}
    warm_stats = {}
    with dev_server() as server:
        client = await connect(server.address, timeout_s=30)
        worker = EpisodeWorker(
            client,
            WorkerOptions(
                task_queue=queue, max_sessions=4 * CONCURRENCY, provision_breaker_after=0
            ),
        )
        async with running(worker):
            for _ in range(repeats):
                # Side by side: the same batch without and with warm boxes, alternated.
                out["cold"].append(await _batch(client, queue, 0))
                out["warm"].append(await _batch(client, queue, CONCURRENCY))
            warm_stats = worker.pools.warm_stats.model_dump()
    rates = {k: spread([r["episodes_per_s"] for r in v]) for k, v in out.items()}
    return {"runs": out, "episodes_per_s": rates}, warm_stats


async def run(quick: bool = False, repeats: int | None = None) -> dict:
    repeats = repeats or (1 if quick else 3)
    load_start = load()
    config = DockerConfig()
    reason = docker_skip_reason(config.image)
    if reason is not None:
        print(f"warm: skipped: {reason}")
        return {"skipped": reason}
    boxes = await _boxes(config, 5 if quick else 15)
    batches, warm_stats = await _batches(repeats)
    rates = batches["episodes_per_s"]
    ratios = {
        "cold_start_vs_claim": ratio(boxes["cold_start_ms"]["median"], boxes["claim_ms"]["median"]),
        "warm_vs_cold_throughput": ratio(rates["warm"]["median"], rates["cold"]["median"]),
    }
    print(
        f"warm: Docker boxes; a batch of {EPISODES} {TURNS}-turn episodes, {CONCURRENCY} at a time"
    )
    print(
        table(
            [
                [
                    fmt_spread(boxes["cold_start_ms"], " ms", 0),
                    fmt_spread(boxes["claim_ms"], " ms", 1),
                    f"{ratios['cold_start_vs_claim']:.0f}x",
                    fmt_spread(rates["cold"], " ep/s", 2),
                    fmt_spread(rates["warm"], " ep/s", 2),
                    f"{ratios['warm_vs_cold_throughput']:.2f}x",
                ]
            ],
            [
                "cold start",
                "warm claim",
                "cold/claim",
                "batch, no pool",
                f"batch, warm: {CONCURRENCY}",
                "warm/cold",
            ],
        )
    )
    return {
        "repeats": repeats,
        "load": [load_start, load()],
        "boxes": boxes,
        "batches": batches,
        "warm_stats": warm_stats,
        "ratios": ratios,
    }
