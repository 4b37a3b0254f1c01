"""Turn overhead: an echo episode through Temporal vs the same harness driven in-process.

Three things side by side, interleaved within each repeat:
- direct: the episode's turns driven by a plain loop over `LiveSession` (no Temporal),
- temporal: the same episode as an `EpisodeWorkflow` on an in-process `EpisodeWorker`,
- floor: a bare workflow doing the same number of no-op activities on another task
  queue (the dispatch the current design pays per turn), and as local activities.
Per-turn latency is the gap between consecutive turns' harness timestamps (stamp
harness), so it covers everything between two turns reaching the harness.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
import uuid

import psutil
from temporalio.worker import Worker

from bench.common import (
    ECHO,
    STAMP,
    cpu_seconds,
    dev_server,
    direct_gaps,
    episode_gaps,
    floor_gaps,
    fmt_spread,
    load,
    ratio,
    running,
    script_spec,
    self_cpu,
    spread,
    summary,
    table,
)
from bench.floor import FloorWorkflow, floor_noop
from episodes.client import EpisodesClient
from episodes.client.connect import connect
from episodes.local import run_episode_local
from workers.worker import EpisodeWorker, WorkerOptions


async def _one_turn(client, queue: str, server_proc, n: int) -> dict[str, dict[str, float]]:
    """`n` 1-turn echo episodes each way, alternating: medians of end-to-end ms, and the
    temporal ones' CPU (server, and this process: worker + client) per episode."""
    direct, temporal, server_cpu, worker_cpu = [], [], [], []
    episodes = EpisodesClient(client, task_queue=queue)
    for _ in range(n):
        spec = script_spec(1, ECHO, name="one")
        t0 = time.perf_counter()
        await run_episode_local(spec, spec.tasks[0])
        direct.append((time.perf_counter() - t0) * 1000)
        spec = script_spec(1, ECHO, name="one")
        cpu0 = (self_cpu(), cpu_seconds(server_proc.pid))
        t0 = time.perf_counter()
        result = await episodes.run_episode(spec, spec.tasks[0])
        temporal.append((time.perf_counter() - t0) * 1000)
        await asyncio.sleep(0.05)  # the server's trailing work (the close) lands here
        cpu1 = (self_cpu(), cpu_seconds(server_proc.pid))
        worker_cpu.append((cpu1[0] - cpu0[0]) * 1000)
        server_cpu.append((cpu1[1] - cpu0[1]) * 1000)
        assert result.turns == 1, result
    med = statistics.median
    return {
        "direct": {"one_turn_episode_ms": med(direct)},
        "temporal": {
            "one_turn_episode_ms": med(temporal),
            "server_cpu_ms_per_episode": med(server_cpu),
            "worker_cpu_ms_per_episode": med(worker_cpu),
        },
    }


async def run(quick: bool = False, repeats: int | None = None) -> dict:
    turns = 10 if quick else 50
    repeats = repeats or (1 if quick else 5)
    queue, floor_q, floor_other = (f"{p}-{uuid.uuid4().hex[:6]}" for p in ("ep", "fl", "fo"))
    samples: dict[str, dict[str, list[float]]] = {}

    def add(name: str, gaps: list[float], **extra: float) -> None:
        s = summary(gaps)
        row = samples.setdefault(name, {})
        for key, value in {"median": s["median"], "p95": s["p95"], **extra}.items():
            row.setdefault(key, []).append(value)

    load_start = load()
    one_turn = 3 if quick else 8  # 1-turn episodes per repeat, alternating with direct
    with dev_server() as server:
        assert server.process is not None
        server_proc = psutil.Process(server.process.pid)
        client = await connect(server.address, timeout_s=30)
        floor_client = await connect(server.address, timeout_s=30)
        worker = EpisodeWorker(client, WorkerOptions(task_queue=queue))
        floor_workers = [
            Worker(
                floor_client, task_queue=floor_q, workflows=[FloorWorkflow], activities=[floor_noop]
            ),
            Worker(floor_client, task_queue=floor_other, activities=[floor_noop]),
        ]
        async with running(worker), contextlib.AsyncExitStack() as stack:
            for w in floor_workers:
                await stack.enter_async_context(w)
            # Warm-up: the first workflow on a fresh server and worker pays one-off costs.
            await episode_gaps(client, "EpisodeWorkflow", script_spec(3, STAMP), queue)
            await floor_gaps(client, 3, "cross", floor_q, floor_other)
            await _one_turn(client, queue, server_proc, 1)
            for _ in range(repeats):
                for name, row in (await _one_turn(client, queue, server_proc, one_turn)).items():
                    for key, value in row.items():
                        samples.setdefault(name, {}).setdefault(key, []).append(value)
                spec = script_spec(turns, STAMP, name="overhead")
                add("direct", await direct_gaps(spec))
                gaps, wall, _result = await episode_gaps(client, "EpisodeWorkflow", spec, queue)
                add(
                    "temporal",
                    gaps,
                    wall_ms_per_turn=wall * 1000 / turns,
                    fixed_ms=wall * 1000 - sum(gaps),
                )
                spec = script_spec(turns, STAMP, name="overhead-act", turn_mode="activity")
                gaps, wall, _result = await episode_gaps(client, "EpisodeWorkflow", spec, queue)
                add("temporal_activity", gaps, wall_ms_per_turn=wall * 1000 / turns)
                add("floor_cross", await floor_gaps(client, turns, "cross", floor_q, floor_other))
                add("floor_local", await floor_gaps(client, turns, "local", floor_q, floor_other))

    figures = {name: {k: spread(v) for k, v in row.items()} for name, row in samples.items()}
    med = {name: figures[name]["median"]["median"] for name in figures}
    ratios = {
        "temporal_vs_direct": ratio(med["temporal"], med["direct"]),
        "temporal_vs_floor_cross": ratio(med["temporal"], med["floor_cross"]),
        "one_turn_temporal_vs_direct": ratio(
            figures["temporal"]["one_turn_episode_ms"]["median"],
            figures["direct"]["one_turn_episode_ms"]["median"],
        ),
        "floor_cross_vs_floor_local": ratio(med["floor_cross"], med["floor_local"]),
    }
    overhead = med["temporal"] - med["direct"]
    labels = {
        "direct": "direct (LiveSession loop)",
        "temporal": "temporal (EpisodeWorkflow)",
        "temporal_activity": "temporal, turn_mode: activity",
        "floor_cross": "floor: no-op activity, other queue",
        "floor_local": "floor: no-op local activity",
    }
    rows = [
        [labels[n], fmt_spread(figures[n]["median"], " ms"), fmt_spread(figures[n]["p95"], " ms")]
        for n in labels
    ]
    print(f"turn overhead: {turns}-turn echo episode, {repeats} repeat(s), median [min..max]")
    print(table(rows, ["variant", "per-turn median", "per-turn p95"]))
    t = figures["temporal"]
    print(
        f"  temporal end to end: {fmt_spread(t['wall_ms_per_turn'], ' ms/turn')}, "
        f"fixed per episode (provision+score+release): {fmt_spread(t['fixed_ms'], ' ms', 0)}"
    )
    one_d, one_t = figures["direct"]["one_turn_episode_ms"], t["one_turn_episode_ms"]
    print(
        f"  1-turn episode end to end: temporal {fmt_spread(one_t, ' ms', 1)} vs direct "
        f"{fmt_spread(one_d, ' ms', 1)}; temporal CPU per episode: server "
        f"{fmt_spread(t['server_cpu_ms_per_episode'], ' ms', 1)} + worker "
        f"{fmt_spread(t['worker_cpu_ms_per_episode'], ' ms', 1)}"
    )
    print(f"  orchestration overhead per turn (temporal - direct, medians): {overhead:.2f} ms")
    print(
        f"  ratios: temporal/direct {ratios['temporal_vs_direct']:.1f}x, "
        f"temporal/floor(cross-queue) {ratios['temporal_vs_floor_cross']:.2f}x, "
        f"floor cross-queue/local {ratios['floor_cross_vs_floor_local']:.1f}x"
    )
    return {
        "turns": turns,
        "repeats": repeats,
        "load": [load_start, load()],
        "figures": figures,
        "ratios": ratios,
        "overhead_ms": overhead,
    }
