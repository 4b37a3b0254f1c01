"""Long episodes: per-turn orchestration over a 2,000-turn episode, continue-as-new included.

One echo-stamp episode through `EpisodeWorkflow` (the drive continues-as-new every
`turns_per_run` turns: 1,000 by default, so one boundary) beside the same turns on
`LiveSession` in-process. Per-turn latency is the gap between consecutive harness
stamps; a boundary turn is the first turn of a continued run (the drive paused, the
workflow continued-as-new, the next run's drive started). Printed: p50/p99/max of the
gaps, the worst gap within 300 turns of a boundary, the worst elsewhere, and the
in-process p99 for scale.
"""

from __future__ import annotations

import uuid

from temporalio.api.enums.v1 import EventType

from bench.common import (
    STAMP,
    dev_server,
    direct_gaps,
    fmt_spread,
    load,
    pct,
    running,
    script_spec,
    spread,
    stamp_gaps_ms,
)
from episodes.client import EpisodesClient
from episodes.client.connect import connect
from episodes.types.io import EpisodeInput
from episodes.types.results import EpisodeResult
from workers.worker import EpisodeWorker, WorkerOptions


async def _durable(client, queue: str, turns: int, per_run: int) -> tuple[list[float], list[int]]:
    spec = script_spec(turns, STAMP, name="long")
    wid = f"long-{uuid.uuid4().hex[:10]}"
    handle = await client.start_workflow(
        "EpisodeWorkflow",
        EpisodeInput(spec=spec, task=spec.tasks[0], turns_per_run=per_run),
        id=wid,
        task_queue=queue,
        result_type=EpisodeResult,
    )
    result = await handle.result()
    if result.turns != turns:
        raise RuntimeError(f"long episode: {result.turns} turns, expected {turns}")
    transcript = await EpisodesClient(client, task_queue=queue).transcript(wid)
    gaps = stamp_gaps_ms(t.reply for t in transcript.turns)
    if len(gaps) != turns - 1:
        raise RuntimeError(f"long episode: the transcript holds {len(gaps) + 1} turns")
    # gaps[i] ends at turn i + 1: a run's first turn k is gaps[k - 1].
    return gaps, [k - 1 for k in await _run_starts(client, wid) if k > 0]


async def _run_starts(client, wid: str) -> list[int]:
    """The first turn of every run of the chain (the carry's `turns_done`)."""
    starts: list[int] = []
    run_id: str | None = None
    async for ev in client.get_workflow_handle(wid).fetch_history_events(page_size=1):
        run_id = ev.workflow_execution_started_event_attributes.first_execution_run_id
        break
    while run_id:
        history = await client.get_workflow_handle(wid, run_id=run_id).fetch_history()
        run_id = None
        for ev in history.events:
            if ev.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
                attrs = ev.workflow_execution_started_event_attributes
                [inp] = await client.data_converter.decode(list(attrs.input.payloads), [dict])
                starts.append((inp.get("carry") or {}).get("turns_done", 0))
            elif ev.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
                attrs = ev.workflow_execution_continued_as_new_event_attributes
                run_id = attrs.new_execution_run_id
    return starts


async def run(quick: bool = False, repeats: int | None = None) -> dict:
    turns, per_run = (300, 100) if quick else (2000, 1000)
    repeats = repeats or (1 if quick else 2)
    rows: dict[str, list[float]] = {}
    load_start = load()
    # The server delays a continue-as-new within 1 s of its run's start (against tight
    # loops): a 1,000-turn echo run is that short, so the throttle is off here (README).
    with dev_server(
        extra_dynamic_config={"history.workflowIdReuseMinimalInterval": '"0s"'}
    ) as server:
        client = await connect(server.address, timeout_s=30)
        queue = f"long-{uuid.uuid4().hex[:6]}"
        async with running(EpisodeWorker(client, WorkerOptions(task_queue=queue))):
            await _durable(client, queue, 20, 10)  # warm-up
            for _ in range(repeats):
                direct = await direct_gaps(script_spec(turns, STAMP, name="long-direct"))
                gaps, boundaries = await _durable(client, queue, turns, per_run)
                # A boundary's cost may land a few turns after the next run's first one
                # (a paused drive runs ahead): the worst gap within 300 turns of it.
                w = min(300, per_run // 3)
                near = {j for k in boundaries for j in range(k - w, k + w)}
                inner = [g for i, g in enumerate(gaps) if i not in near] or [float("nan")]
                for key, value in {
                    "median_ms": pct(gaps, 0.5),
                    "p99_ms": pct(gaps, 0.99),
                    "max_within_run_ms": max(inner),
                    "worst_boundary_ms": max(gaps[i] for i in near if 0 <= i < len(gaps)),
                    "direct_median_ms": pct(direct, 0.5),
                    "direct_p99_ms": pct(direct, 0.99),
                }.items():
                    rows.setdefault(key, []).append(value)
    figures = {k: spread(v) for k, v in rows.items()}
    print(
        f"long: {turns}-turn echo episode, continue-as-new every {per_run} turns, "
        f"{repeats} repeat(s), median [min..max] of per-turn gaps"
    )
    for key, label in [
        ("median_ms", "temporal median"),
        ("p99_ms", "temporal p99"),
        ("max_within_run_ms", "temporal worst turn away from boundaries"),
        ("worst_boundary_ms", "temporal worst continue-as-new boundary"),
        ("direct_median_ms", "in-process median"),
        ("direct_p99_ms", "in-process p99"),
    ]:
        print(f"  {label}: {fmt_spread(figures[key], ' ms')}")
    return {
        "turns": turns,
        "turns_per_run": per_run,
        "repeats": repeats,
        "load": [load_start, load()],
        "figures": figures,
    }
