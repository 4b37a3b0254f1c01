"""The workflows in the SDK's sandbox or as plain code: what the worker pays per episode.

One dev server, two `EpisodeWorker`s in this process on queues of their own, one with
`workflow_sandbox` on (the SDK's `SandboxedWorkflowRunner`), one with the shipped
default (`UnsandboxedWorkflowRunner`). Side by side in one run:
- 1-turn echo episodes, each repeat alternating in-process / sandbox / plain (order
  swapped every episode): end-to-end ms over the in-process run, and the CPU of this
  process (worker + client) and of the server per episode;
- 100 concurrent 10-turn episodes (`bench.throughput`'s batch), the three rotating per
  repeat: turns/s over the in-process batch's.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid

from bench.common import (
    ECHO,
    cpu_seconds,
    dev_server,
    load,
    ratio,
    running,
    script_spec,
    self_cpu,
    table,
)
from bench.throughput import _batch
from episodes.client import EpisodesClient
from episodes.client.connect import connect
from episodes.local import run_episode_local
from workers.worker import EpisodeWorker, WorkerOptions

RUNNERS = ("sandbox", "plain")


async def _one_turn(eps: dict[str, EpisodesClient], server_pid: int, n: int) -> dict:
    ms: dict[str, list[float]] = {k: [] for k in ("in_process", *RUNNERS)}
    cpu: dict[str, list[tuple[float, float]]] = {k: [] for k in RUNNERS}
    for i in range(n):
        spec = script_spec(1, ECHO, name="one")
        t0 = time.perf_counter()
        await run_episode_local(spec, spec.tasks[0])
        ms["in_process"].append((time.perf_counter() - t0) * 1000)
        for name in RUNNERS if i % 2 else RUNNERS[::-1]:
            spec = script_spec(1, ECHO, name="one")
            c0 = (self_cpu(), cpu_seconds(server_pid))
            t0 = time.perf_counter()
            result = await eps[name].run_episode(spec, spec.tasks[0])
            ms[name].append((time.perf_counter() - t0) * 1000)
            await asyncio.sleep(0.05)  # the server's trailing work (the close) lands here
            c1 = (self_cpu(), cpu_seconds(server_pid))
            cpu[name].append(((c1[0] - c0[0]) * 1000, (c1[1] - c0[1]) * 1000))
            assert result.turns == 1, result
    med = statistics.median
    base = med(ms["in_process"])
    out: dict = {"in_process_ms": base}
    for name in RUNNERS:
        out[name] = {
            "one_turn_over_in_process_ms": med(ms[name]) - base,
            "worker_cpu_ms_per_episode": med(c[0] for c in cpu[name]),
            "server_cpu_ms_per_episode": med(c[1] for c in cpu[name]),
        }
    return out


async def run(quick: bool = False, repeats: int | None = None) -> dict:
    repeats = repeats or (1 if quick else 3)
    one_turn = 4 if quick else 20
    episodes, turns = (10, 3) if quick else (100, 10)
    load_start = load()
    with dev_server() as server:
        assert server.process is not None
        server_pid = server.process.pid
        client = await connect(server.address, timeout_s=30)
        queues = {name: f"wr-{name}-{uuid.uuid4().hex[:6]}" for name in RUNNERS}
        workers = {
            name: EpisodeWorker(
                client, WorkerOptions(task_queue=queues[name], workflow_sandbox=name == "sandbox")
            )
            for name in RUNNERS
        }
        async with running(workers["sandbox"]), running(workers["plain"]):
            eps = {name: EpisodesClient(client, task_queue=queues[name]) for name in RUNNERS}
            await _one_turn(eps, server_pid, 1)  # warm-up
            one = await _one_turn(eps, server_pid, one_turn * repeats)
            rates: dict[str, list[float]] = {"in_process": [], **{n: [] for n in RUNNERS}}
            order = ["in_process", *RUNNERS]
            for r in range(repeats):
                for name in order[r % 3 :] + order[: r % 3]:
                    wf = None if name == "in_process" else "EpisodeWorkflow"
                    queue = queues.get(name, "")
                    row = await _batch(client, wf, queue, episodes, turns)
                    rates[name].append(row["turns_per_s"])
    med = {name: statistics.median(v) for name, v in rates.items()}
    figures = {
        **{name: {**one[name], "turns_per_s": med[name]} for name in RUNNERS},
        "in_process": {"one_turn_ms": one["in_process_ms"], "turns_per_s": med["in_process"]},
        "turns_per_s_raw": rates,
    }
    ratios = {
        f"{name}_vs_in_process_turns_per_s": ratio(med[name], med["in_process"]) for name in RUNNERS
    }
    ratios["plain_vs_sandbox_worker_cpu"] = ratio(
        one["plain"]["worker_cpu_ms_per_episode"], one["sandbox"]["worker_cpu_ms_per_episode"]
    )
    print(
        f"workflow runner: {one_turn * repeats} 1-turn episodes each way, {repeats} x "
        f"{episodes} concurrent {turns}-turn episodes; load {load_start:.1f} -> {load():.1f}"
    )
    rows = [
        [
            name,
            f"+{one[name]['one_turn_over_in_process_ms']:.1f}",
            f"{one[name]['worker_cpu_ms_per_episode']:.1f}",
            f"{one[name]['server_cpu_ms_per_episode']:.1f}",
            f"{med[name]:.0f} ({ratios[f'{name}_vs_in_process_turns_per_s']:.2f}x)",
        ]
        for name in RUNNERS
    ]
    print(
        table(
            rows,
            [
                "workflows",
                "1-turn ms over in-process",
                "worker CPU ms/ep",
                "server CPU ms/ep",
                f"turns/s (vs in-process {med['in_process']:.0f})",
            ],
        )
    )
    return {"figures": figures, "ratios": ratios}
