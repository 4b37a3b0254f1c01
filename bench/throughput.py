"""Throughput: 100 concurrent 10-turn episodes of a real harness on one worker.

Every episode runs the echo reference harness as a real subprocess. Measured per
variant (the shipped workflow's turn modes, group execution, and in-process without
Temporal; the turn-design study's prototypes left with the study, bench/README.md):
episodes/s and turns/s from the first start to the last result, and the CPU
seconds spent by the worker process (this process: worker + the client starting
episodes), by the harness processes, and by the Temporal server.
"""

from __future__ import annotations

import asyncio
import os
import resource
import time
import uuid

import psutil
from temporalio.api.enums.v1 import EventType

from bench.common import (
    ECHO,
    dev_server,
    fmt_spread,
    load,
    ratio,
    running,
    self_cpu,
    spread,
    table,
    tree_cpu,
)
from episodes.client import EpisodesClient
from episodes.client.connect import connect
from episodes.local import run_episode_local
from episodes.types.group import group_workflow_id
from episodes.types.io import EpisodeInput
from episodes.types.results import EpisodeResult
from episodes.types.spec import parse_spec
from workers.worker import EpisodeWorker, WorkerOptions

# BENCH_EAGER_START=0 measures the lever off (the first workflow task dispatched).
EAGER = os.environ.get("BENCH_EAGER_START", "1") != "0"
# Extra back-to-back pairs of the two in-process variants (their ratio is a target).
PAIRS = int(os.environ.get("BENCH_PAIRS", "4"))
TREE = False  # whether harness CPU counts the boxes' processes (`tree_cpu`)

# name -> workflow type (`:activity`: turn_mode activity); None: in-process, no Temporal.
VARIANTS: dict[str, str | None] = {
    "shipped": "EpisodeWorkflow",
    "turn_activity": "EpisodeWorkflow:activity",
    "in_process": None,
    "in_process_plain": "plain",
    "groups": "groups",
}
# The variants whose harness runs as a plain process group (`isolation: none`); every
# other one runs it in the default sandbox.
PLAIN = {"in_process_plain", "groups"}
# Members per group in the `groups` variant (issue 32's target: groups of 8).
GROUP_OF = 8
LABELS = {
    "in_process": "in-process episodes.local (no Temporal), the default sandbox",
    "in_process_plain": "in-process episodes.local, isolation: none",
    "turn_activity": "shipped, turn_mode: activity",
    "shipped": "shipped EpisodeWorkflow (drive)",
    "groups": f"execution: group (shipped, opt-in), groups of {GROUP_OF}, isolation: none",
}


def _counts(f: dict) -> str:
    if "events_per_episode" not in f:
        return "-"
    events, tasks = f["events_per_episode"]["median"], f["workflow_tasks_per_episode"]["median"]
    return f"{events:.3g} / {tasks:.3g}"


def _cpu(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system + t.children_user + t.children_system


def _harness_cpu() -> float:
    """CPU of what the worker started (harnesses, boxes, and the server while it runs:
    the caller subtracts it). Through `tree_cpu` where it can say, which counts a
    sandbox's processes; else the waited-for children's (not a box's processes)."""
    tree = tree_cpu()
    if tree is not None:
        return tree - self_cpu()
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


async def _batch(client, workflow: str | None, queue: str, episodes: int, turns: int) -> dict:
    """One batch of a variant; `workflow` "plain": in-process with `isolation: none`;
    "groups": `run_batch(groups=True, execution="group")` with `isolation: none`."""
    plain = workflow in ("plain", "groups")
    harness: dict = {"command": ECHO, "ready_timeout_s": 120}
    if plain:
        harness["runtime"] = {"type": "subprocess", "isolation": "none"}
    if workflow == "groups":
        return await _group_batch(client, queue, harness, episodes, turns)
    if plain:
        workflow = None
    spec = parse_spec(
        {
            "name": f"tp-{uuid.uuid4().hex[:6]}",
            "env": "script",
            "tasks": [
                {"id": f"t{i}", "data": {"messages": [f"m{j}" for j in range(turns)]}}
                for i in range(episodes)
            ],
            "harness": harness,
            "max_turns": turns,
            "turn_timeout_s": 120,
            "worker_lost_timeout_s": 60,
            "turn_mode": "activity" if workflow and workflow.endswith(":activity") else "drive",
        }
    )
    workflow = workflow.split(":")[0] if workflow else None
    started = time.perf_counter()
    if workflow is None:
        return _rates(
            await asyncio.gather(*(run_episode_local(spec, t) for t in spec.tasks)),
            started,
            "in-process",
            episodes,
            turns,
        )
    handles = await asyncio.gather(
        *(
            client.start_workflow(
                workflow,
                EpisodeInput(spec=spec.model_copy(update={"tasks": [t]}), task=t),
                id=f"{spec.name}.{t.id}",
                task_queue=queue,
                result_type=EpisodeResult,
                # The starter has a worker on this queue: its first workflow task comes
                # back with the start (EpisodesClient.start_episode does the same).
                request_eager_start=EAGER,
            )
            for t in spec.tasks
        )
    )
    results = await asyncio.gather(*(h.result() for h in handles))
    row = _rates(results, started, workflow, episodes, turns)
    row.update(await _history_counts(handles[0]))
    return row


async def _group_batch(client, queue: str, harness: dict, episodes: int, turns: int) -> dict:
    """The shipped group execution: GROUP_OF samples of each task as one
    EpisodeGroupWorkflow, every group in flight at once, through the client's stream."""
    groups = max(1, episodes // GROUP_OF)
    spec = parse_spec(
        {
            "name": f"tpg-{uuid.uuid4().hex[:6]}",
            "env": "script",
            "tasks": [
                {"id": f"t{i}", "data": {"messages": [f"m{j}" for j in range(turns)]}}
                for i in range(groups)
            ],
            "samples": GROUP_OF,
            "harness": harness,
            "max_turns": turns,
            "turn_timeout_s": 120,
            "worker_lost_timeout_s": 60,
        }
    )
    ec = EpisodesClient(client, task_queue=queue)
    started = time.perf_counter()
    stream = ec.run_batch(spec, groups=True, execution="group", concurrency=groups * GROUP_OF)
    results = [r async for g in stream for r in g.results]
    row = _rates(results, started, "groups", len(results), turns)
    handle = client.get_workflow_handle(group_workflow_id(spec.name, spec.tasks[0].id))
    counts = await _history_counts(handle)
    row.update({k: v / GROUP_OF for k, v in counts.items()})  # per episode
    row["episodes"] = len(results)
    return row


def _rates(results: list, started: float, what: str, episodes: int, turns: int) -> dict:
    wall = time.perf_counter() - started
    done = sum(r.turns for r in results)
    bad = [r for r in results if r.termination != "env_done" or r.turns != turns]
    if bad:
        raise RuntimeError(f"{what}: {len(bad)} episodes ended badly, e.g. {bad[0]}")
    return {"wall_s": wall, "episodes_per_s": episodes / wall, "turns_per_s": done / wall}


async def _history_counts(handle) -> dict:
    """History events and workflow tasks of one episode (its whole chain's first run)."""
    events = tasks = 0
    async for ev in handle.fetch_history_events():
        events += 1
        tasks += ev.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
    return {"events_per_episode": events, "workflow_tasks_per_episode": tasks}


async def run(quick: bool = False, repeats: int | None = None) -> dict:
    episodes, turns = (10, 3) if quick else (100, 10)
    repeats = repeats or (1 if quick else 3)
    samples: dict[str, dict[str, list[float]]] = {v: {} for v in VARIANTS}
    load_start = load()
    global TREE
    TREE = tree_cpu() is not None  # before the server starts: it is in the tree then
    with dev_server() as server:
        assert server.process is not None
        server_proc = psutil.Process(server.process.pid)
        client = await connect(server.address, timeout_s=30)
        queue = f"tp-{uuid.uuid4().hex[:6]}"
        worker = EpisodeWorker(client, WorkerOptions(task_queue=queue))
        async with running(worker):
            for wf in VARIANTS.values():  # warm-up
                await _batch(client, wf, queue, 2, 2)

            async def measure(name: str) -> None:
                cpu0 = (self_cpu(), _harness_cpu(), _cpu(server_proc))
                row = await _batch(client, VARIANTS[name], queue, episodes, turns)
                cpu1 = (self_cpu(), _harness_cpu(), _cpu(server_proc))
                row["worker_cpu_s"] = cpu1[0] - cpu0[0]
                row["server_cpu_s"] = cpu1[2] - cpu0[2]
                row["harness_cpu_s"] = cpu1[1] - cpu0[1]
                if TREE:  # the server is in the tree: not a harness's
                    row["harness_cpu_s"] -= row["server_cpu_s"]
                n = row.pop("episodes", episodes)  # `groups` runs whole groups
                for part in ("worker", "harness", "server"):
                    row[f"{part}_cpu_ms_per_episode"] = row[f"{part}_cpu_s"] * 1000 / n
                for k, v in row.items():
                    samples[name].setdefault(k, []).append(v)

            for r in range(repeats):
                order = list(VARIANTS)
                for name in order[r % len(order) :] + order[: r % len(order)]:
                    await measure(name)
            # The two in-process variants are a few seconds a batch, and what the same
            # batch costs drifts by 20% or more within a minute on the 2-core VM this
            # ran on: more pairs, back to back, each in the other order than the last,
            # for `sandbox_vs_plain_in_process` (a target).
            for r in range(PAIRS if not quick else 0):
                pair = ["in_process", "in_process_plain"]
                for name in pair if r % 2 else pair[::-1]:
                    await measure(name)
    figures = {n: {k: spread(v) for k, v in row.items()} for n, row in samples.items()}
    base = figures["shipped"]["turns_per_s"]["median"]
    ratios = {
        f"{n}_vs_shipped": ratio(f["turns_per_s"]["median"], base) for n, f in figures.items()
    }
    ratios["durable_vs_in_process"] = ratio(
        figures["shipped"]["turns_per_s"]["median"], figures["in_process"]["turns_per_s"]["median"]
    )
    # What the default sandbox costs an episode, both in-process, side by side (issue 32).
    ratios["sandbox_vs_plain_in_process"] = ratio(
        figures["in_process"]["turns_per_s"]["median"],
        figures["in_process_plain"]["turns_per_s"]["median"],
    )
    # Durable group execution against in-process `isolation: none`, both plain (issue 32).
    ratios["groups_vs_in_process_plain"] = ratio(
        figures["groups"]["turns_per_s"]["median"],
        figures["in_process_plain"]["turns_per_s"]["median"],
    )
    print(
        f"throughput: {episodes} concurrent {turns}-turn echo episodes on one worker, "
        f"{repeats} repeat(s) (the in-process pair {PAIRS} more), median [min..max]"
    )
    rows = [
        [
            LABELS[n],
            fmt_spread(f["episodes_per_s"], "", 1),
            fmt_spread(f["turns_per_s"], "", 0),
            fmt_spread(f["worker_cpu_ms_per_episode"], "", 0),
            fmt_spread(f["harness_cpu_ms_per_episode"], "", 0),
            fmt_spread(f["server_cpu_ms_per_episode"], "", 0),
            _counts(f),
            f"{ratios[f'{n}_vs_shipped']:.2f}x",
        ]
        for n, f in figures.items()
    ]
    print(
        table(
            rows,
            [
                "variant",
                "episodes/s",
                "turns/s",
                "worker CPU ms/ep",
                "harness CPU ms/ep",
                "server CPU ms/ep",
                "events / WFTs per ep",
                "turns/s vs shipped",
            ],
        )
    )
    print(
        f"  durable (shipped) / in-process turns/s: {ratios['durable_vs_in_process']:.2f}x"
        f" (eager start {'on' if EAGER else 'off'})"
    )
    print(
        "  in-process, the default sandbox / isolation: none turns/s: "
        f"{ratios['sandbox_vs_plain_in_process']:.2f}x (harness CPU "
        f"{'with' if TREE else 'without'} the boxes' processes)"
    )
    print(
        f"  durable group execution (groups of {GROUP_OF}) / in-process, isolation: none "
        f"turns/s: {ratios['groups_vs_in_process_plain']:.2f}x"
    )
    return {
        "eager_start": EAGER,
        "episodes": episodes,
        "turns": turns,
        "repeats": repeats,
        "in_process_pairs": repeats + (0 if quick else PAIRS),
        "load": [load_start, load()],
        "figures": figures,
        "ratios": ratios,
        "harness_cpu_counts_boxes": TREE,
    }
