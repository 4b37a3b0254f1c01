"""The turn-design study: every prototype design on one server and worker, side by side.

Per design, interleaved within each repeat:
- latency: a long echo episode (200 turns), per-turn gaps from the stamp harness:
  median, p95, and p95 within each bucket of turn indices (pooled over repeats);
- history: events and workflow tasks per turn (parent and child histories);
- visibility: with slow turns (100 ms of "model time"), how long after a turn reaches
  the harness's reply the `progress` query on the episode shows it (polled at 20 Hz).
The Temporal floors (no-op activity on another queue / same queue / local) and the
same turns driven without Temporal (the machine's own noise) run at the same count.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from temporalio.api.enums.v1 import EventType

from bench.common import (
    STAMP,
    dev_server,
    direct_gaps,
    episode_gaps,
    floor_gaps,
    fmt_spread,
    load,
    pct,
    ratio,
    running,
    script_spec,
    spread,
    summary,
    table,
)
from bench.designs.worker import DesignWorker
from episodes.client.connect import connect
from episodes.types.io import EpisodeInput, EpisodeProgress
from episodes.types.results import EpisodeResult

DESIGNS = {
    "a": ("TurnPerActivityEpisode", "(a) one turn activity per turn on the session queue"),
    "shipped": ("EpisodeWorkflow", "shipped: EpisodeWorkflow (the (c'1s) drive)"),
    "b": ("ChildLocalEpisode", "(b) child on session queue, local-activity turns"),
    "b2s": ("ChildLocal2sEpisode", "(b) same, child task timeout 2 s"),
    "c": ("UpdateEpisode", "(c) drive activity + Update per turn (awaited)"),
    "c1": ("UpdateAhead1Episode", "(c'1) drive + Updates, 1 turn ahead"),
    "c32": ("UpdateAhead32Episode", "(c'32) drive + batched Updates, <=32 ahead"),
    "c32l": ("UpdateLingerEpisode", "(c'32+linger) same, Updates wait 20 ms to batch"),
    "c1s": ("UpdateLagEpisode", "(c'1s) drive + batched Updates, history <=1 s behind"),
    "d": ("ChildEagerEpisode", "(d) child on session queue, eager activities"),
}
FLOORS = {
    "direct": "baseline: same turns, LiveSession loop (no Temporal)",
    "floor_cross": "floor: no-op activity, other queue",
    "floor_same": "floor: no-op activity, same queue (eager)",
    "floor_local": "floor: no-op local activity",
}


async def _history_counts(client: Any, workflow_id: str) -> tuple[int, int]:
    """(events, workflow tasks completed) of the episode and its session child, if any."""
    events = tasks = 0
    for wid in (workflow_id, f"{workflow_id}:session"):
        try:
            async for ev in client.get_workflow_handle(wid).fetch_history_events():
                events += 1
                tasks += ev.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
        except Exception:  # no child for this design
            continue
    return events, tasks


async def _visibility(client: Any, workflow: str, queue: str, turns: int) -> list[float]:
    """Per turn: ms from the harness's reply to the first `progress` answer that shows it."""
    spec = script_spec(
        turns, name="vis", harness={"command": STAMP, "env": {"STAMP_DELAY_MS": "100"}}
    )
    handle = await client.start_workflow(
        workflow,
        EpisodeInput(spec=spec, task=spec.tasks[0]),
        id=f"vis-{workflow}-{uuid.uuid4().hex[:8]}",
        task_queue=queue,
        result_type=EpisodeResult,
    )
    seen: dict[int, int] = {}  # turn -> monotonic ns when a query first showed it
    while True:
        try:
            p = await handle.query("progress", result_type=EpisodeProgress)
        except Exception:
            p = None
        now = time.monotonic_ns()
        if p is not None:
            for n in range(p.turns_done):
                seen.setdefault(n, now)
            if p.status == "done":
                break
        await asyncio.sleep(0.05)
    await handle.result()
    p = await handle.query("progress", result_type=EpisodeProgress)
    return [(seen[t.turn] - t.reply["t_ns"]) / 1e6 for t in p.turns if t.turn in seen]


async def run(
    quick: bool = False, repeats: int | None = None, only: list[str] | None = None
) -> dict:
    designs = {k: v for k, v in DESIGNS.items() if not only or k in only}
    if not designs:
        raise ValueError(f"no design among {only}; keys are {', '.join(DESIGNS)}")
    turns = 20 if quick else 200
    repeats = repeats or (1 if quick else 3)
    vis_turns = 5 if quick else 30
    bucket = max(1, turns // 10)
    queue = f"study-{uuid.uuid4().hex[:6]}"
    per: dict[str, dict[str, list[float]]] = {}
    pooled: dict[str, list[list[float]]] = {}
    vis: dict[str, list[float]] = {}

    def add(name: str, gaps: list[float], **extra: float) -> None:
        s = summary(gaps)
        row = per.setdefault(name, {})
        for key, value in {"median": s["median"], "p95": s["p95"], **extra}.items():
            row.setdefault(key, []).append(value)
        pooled.setdefault(name, []).append(gaps)

    load_start = load()
    with dev_server() as server:
        client = await connect(server.address, timeout_s=30)
        worker = DesignWorker(client, queue)
        async with running(worker):
            for wf, _ in designs.values():  # warm-up: first runs pay one-off costs
                await episode_gaps(client, wf, script_spec(3, STAMP), queue)
            for r in range(repeats):
                order = list(designs.items())
                order = order[r % len(order) :] + order[: r % len(order)]  # rotate
                for key, (wf, _) in order:
                    spec = script_spec(turns, STAMP, name=f"study-{key}")
                    gaps, wall, result = await episode_gaps(client, wf, spec, queue)
                    events, tasks = await _history_counts(client, result.workflow_id)
                    add(
                        key,
                        gaps,
                        wall_ms_per_turn=wall * 1000 / turns,
                        events_per_turn=events / turns,
                        tasks_per_turn=tasks / turns,
                    )
                add("direct", await direct_gaps(script_spec(turns, STAMP, name="direct")))
                for mode in ("cross", "same", "local"):
                    other = worker.session_queue
                    add(f"floor_{mode}", await floor_gaps(client, turns, mode, queue, other))
            for key, (wf, _) in designs.items():
                vis[key] = await _visibility(client, wf, queue, vis_turns)

    figures: dict[str, Any] = {}
    for name, row in per.items():
        fig = {k: spread(v) for k, v in row.items()}
        # p95 per bucket of turn indices, pooled over repeats ("at every turn index").
        buckets = []
        for start in range(0, turns - 1, bucket):
            values = [g for gaps in pooled[name] for g in gaps[start : start + bucket]]
            buckets.append(pct(values, 0.95))
        fig["bucket_p95"] = buckets
        fig["worst_bucket_p95"] = max(buckets)
        if name in vis:
            fig["visibility_ms"] = summary(vis[name])
        figures[name] = fig

    med = {n: figures[n]["median"]["median"] for n in figures}
    base = med.get("a", med["direct"])
    ratios = {f"{k}_vs_a": ratio(med[k], base) for k in designs}
    ratios |= {f"{k}_vs_floor_local": ratio(med[k], med["floor_local"]) for k in designs}
    ratios |= {f"{k}_vs_direct": ratio(med[k], med["direct"]) for k in designs}
    rows = []
    for key, (_, label) in designs.items():
        f = figures[key]
        rows.append(
            [
                label,
                fmt_spread(f["median"], ""),
                fmt_spread(f["p95"], "", 1),
                f"{f['worst_bucket_p95']:.1f}",
                f"{f['wall_ms_per_turn']['median']:.1f}",
                f"{f['events_per_turn']['median']:.1f}/{f['tasks_per_turn']['median']:.2f}",
                f"{f['visibility_ms']['median']:.0f}/{f['visibility_ms']['max']:.0f}",
                f"{ratios[f'{key}_vs_a']:.2f}",
            ]
        )
    for key, label in FLOORS.items():
        f = figures[key]
        rows.append(
            [
                label,
                fmt_spread(f["median"], ""),
                fmt_spread(f["p95"], "", 1),
                f"{f['worst_bucket_p95']:.1f}",
                "",
                "",
                "",
                f"{ratio(med[key], base):.2f}",
            ]
        )
    print(
        f"turn designs: {turns}-turn echo episode, {repeats} repeat(s), per-turn ms "
        f"(median [min..max] over repeats); visibility with {vis_turns} turns of 100 ms"
    )
    print(
        table(
            rows,
            [
                "design",
                "median",
                "p95",
                "worst p95/bucket",
                "wall/turn",
                "events/WFTs per turn",
                "visible after (med/max)",
                "vs (a)" if "a" in med else "vs direct",
            ],
        )
    )
    return {
        "turns": turns,
        "repeats": repeats,
        "bucket": bucket,
        "load": [load_start, load()],
        "designs": {k: v[0] for k, v in designs.items()},
        "ratio_base": "a" if "a" in med else "direct",
        "figures": figures,
        "ratios": ratios,
    }
