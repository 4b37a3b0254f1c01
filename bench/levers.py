"""Issue 13's levers, each switched off in turn beside the shipped configuration.

100 concurrent 10-turn echo episodes on one `EpisodeWorker` (as `throughput`), in
rotating order within each repeat: `shipped` (every lever on), then one lever off at
a time, and the same episodes in-process. Levers that can be switched at run time:
- `no_pyc`: the workflow modules without bytecode (what PYTHONDONTWRITEBYTECODE=1 did
  before the worker precompiled them: the sandbox compiled them for every run);
- `no_eager`: no eager workflow start (the first workflow task dispatched by matching);
- `no_linger`: Updates sent as soon as a turn finishes (no 50 ms linger).
The folded episode end (result-carried turns, release in the drive) is a workflow
change behind a patch: `throughput` compares it with (c'1s), the design before it.
"""

from __future__ import annotations

import importlib.util
import resource
import uuid
from pathlib import Path

import psutil
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

import bench.throughput as tp
import workflows
from bench.common import dev_server, fmt_spread, load, ratio, running, spread, table
from episodes.client.connect import connect
from workers.worker import EpisodeWorker, WorkerOptions, precompile_workflows

VARIANTS = ["shipped", "no_pyc", "no_eager", "no_linger", "in_process"]


class _Linger(Interceptor):
    def __init__(self) -> None:
        self.off = False

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        outer = self

        class _In(ActivityInboundInterceptor):
            async def execute_activity(self, input: ExecuteActivityInput):  # type: ignore[no-untyped-def]
                if outer.off and input.args and hasattr(input.args[0], "linger_s"):
                    input.args[0].linger_s = 0.0
                return await super().execute_activity(input)

        return _In(next)


def _drop_bytecode() -> None:
    for path in Path(workflows.__file__).parent.glob("*.py"):
        Path(importlib.util.cache_from_source(str(path))).unlink(missing_ok=True)


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def run(quick: bool = False, repeats: int | None = None) -> dict:
    episodes, turns = (10, 3) if quick else (100, 10)
    repeats = repeats or (1 if quick else 3)
    samples: dict[str, dict[str, list[float]]] = {v: {} for v in VARIANTS}
    load_start = load()
    linger = _Linger()
    with dev_server() as server:
        assert server.process is not None
        server_proc = psutil.Process(server.process.pid)
        client = await connect(server.address, timeout_s=30)
        queue = f"lv-{uuid.uuid4().hex[:6]}"
        worker = EpisodeWorker(client, WorkerOptions(task_queue=queue), interceptors=[linger])
        async with running(worker):
            await tp._batch(client, "EpisodeWorkflow", queue, 2, 2)
            for r in range(repeats):
                order = VARIANTS[r % len(VARIANTS) :] + VARIANTS[: r % len(VARIANTS)]
                for name in order:
                    tp.EAGER = name != "no_eager"
                    linger.off = name == "no_linger"
                    if name == "no_pyc":
                        _drop_bytecode()
                    cpu0 = (_cpu(), tp._cpu(server_proc))
                    wf = None if name == "in_process" else "EpisodeWorkflow"
                    row = await tp._batch(client, wf, queue, episodes, turns)
                    cpu1 = (_cpu(), tp._cpu(server_proc))
                    precompile_workflows()
                    row["worker_cpu_ms_per_episode"] = (cpu1[0] - cpu0[0]) * 1000 / episodes
                    row["server_cpu_ms_per_episode"] = (cpu1[1] - cpu0[1]) * 1000 / episodes
                    for k, v in row.items():
                        samples[name].setdefault(k, []).append(v)
    tp.EAGER = True
    figures = {n: {k: spread(v) for k, v in row.items()} for n, row in samples.items()}
    base = figures["shipped"]["turns_per_s"]["median"]
    ratios = {
        f"{n}_vs_shipped": ratio(f["turns_per_s"]["median"], base) for n, f in figures.items()
    }
    print(f"levers: {episodes} concurrent {turns}-turn echo episodes, {repeats} repeat(s)")
    rows = [
        [
            n,
            fmt_spread(f["turns_per_s"], "", 0),
            fmt_spread(f["worker_cpu_ms_per_episode"], "", 0),
            fmt_spread(f["server_cpu_ms_per_episode"], "", 0),
            tp._counts(f),
            f"{ratios[f'{n}_vs_shipped']:.2f}x",
        ]
        for n, f in figures.items()
    ]
    head = ["variant", "turns/s", "worker CPU ms/ep", "server CPU ms/ep", "events / WFTs"]
    print(table(rows, [*head, "turns/s vs shipped"]))
    return {
        "episodes": episodes,
        "turns": turns,
        "repeats": repeats,
        "load": [load_start, load()],
        "figures": figures,
        "ratios": ratios,
    }
