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

import contextlib
import uuid

from temporalio.worker import Worker

from bench.common import (
    STAMP,
    dev_server,
    direct_gaps,
    episode_gaps,
    floor_gaps,
    fmt_spread,
    load,
    ratio,
    running,
    script_spec,
    spread,
    summary,
    table,
)
from bench.designs.floor import FloorWorkflow, floor_noop
from episodes.client.connect import connect
from workers.worker import EpisodeWorker, WorkerOptions


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
    with dev_server() as server:
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
            for _ in range(repeats):
                spec = script_spec(turns, STAMP, name="overhead")
                add("direct", await direct_gaps(spec))
                gaps, wall, _result = await episode_gaps(client, "EpisodeWorkflow", spec, queue)
                add(
                    "temporal",
                    gaps,
                    wall_ms_per_turn=wall * 1000 / turns,
                    fixed_ms=wall * 1000 - sum(gaps),
                )
                add("floor_cross", await floor_gaps(client, turns, "cross", floor_q, floor_other))
                add("floor_local", await floor_gaps(client, turns, "local", floor_q, floor_other))

    figures = {name: {k: spread(v) for k, v in row.items()} for name, row in samples.items()}
    med = {name: figures[name]["median"]["median"] for name in figures}
    ratios = {
        "temporal_vs_direct": ratio(med["temporal"], med["direct"]),
        "temporal_vs_floor_cross": ratio(med["temporal"], med["floor_cross"]),
        "floor_cross_vs_floor_local": ratio(med["floor_cross"], med["floor_local"]),
    }
    overhead = med["temporal"] - med["direct"]
    labels = {
        "direct": "direct (LiveSession loop)",
        "temporal": "temporal (EpisodeWorkflow)",
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
