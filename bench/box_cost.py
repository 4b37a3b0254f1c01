"""A box's own cost: start one, run one process in it (`/bin/true`), stop it, in turn.

Per box: CPU ms of everything it took (the worker's side and the box's processes, the
compiled or Python in-box agent, bwrap, the cgroup's setup: `tree_cpu`, where this
machine can count a sandbox's processes) and wall ms, for the default sandbox and for
`isolation: none` (a plain process group), alternating, in one run (issue 32: a
sandbox's start and stop at <= 15 ms of CPU).

    python -m bench box [--quick]
"""

from __future__ import annotations

import time

from bench.common import fmt_spread, load, self_cpu, spread, table, tree_cpu
from episodes.runtimes.sandbox.runtime import local_runtime
from episodes.types.runtime import SubprocessConfig

KINDS = {"sandbox": SubprocessConfig(), "plain": SubprocessConfig(isolation="none")}


async def _one(config: SubprocessConfig) -> None:
    box = local_runtime(config)
    try:
        await box.start()
        proc = await box.open_process(["/bin/true"], {}, None)
        if await proc.wait() != 0:
            raise RuntimeError("/bin/true failed in the box")
    finally:
        await box.stop()


async def _measure(config: SubprocessConfig, boxes: int) -> dict[str, float]:
    cpu0, self0, t0 = tree_cpu(), self_cpu(), time.perf_counter()
    for _ in range(boxes):
        await _one(config)
    wall = time.perf_counter() - t0
    cpu1, self1 = tree_cpu(), self_cpu()
    out = {
        "wall_ms_per_box": wall * 1000 / boxes,
        "worker_cpu_ms_per_box": (self1 - self0) * 1000 / boxes,
    }
    if cpu0 is not None and cpu1 is not None:
        out["cpu_ms_per_box"] = (cpu1 - cpu0) * 1000 / boxes
    return out


async def run(quick: bool = False, repeats: int | None = None) -> dict:
    boxes = 10 if quick else 50
    repeats = repeats or (1 if quick else 3)
    load_start = load()
    tree_cpu()  # into the counting cgroup before the first box
    for config in KINDS.values():  # warm-up (and the agent's compile, once)
        await _one(config)
    samples: dict[str, dict[str, list[float]]] = {k: {} for k in KINDS}
    for r in range(repeats):
        order = list(KINDS.items())[:: 1 if r % 2 == 0 else -1]
        for name, config in order:
            for k, v in (await _measure(config, boxes)).items():
                samples[name].setdefault(k, []).append(v)
    figures = {n: {k: spread(v) for k, v in s.items()} for n, s in samples.items()}
    print(f"box: start, one process, stop; {boxes} boxes x {repeats} repeat(s), median [min..max]")
    cols = ["cpu_ms_per_box", "worker_cpu_ms_per_box", "wall_ms_per_box"]
    rows = [
        [n, *(fmt_spread(f[c], " ms", 1) if c in f else "-" for c in cols)]
        for n, f in figures.items()
    ]
    print(table(rows, ["runtime", "CPU (all of it)", "worker CPU", "wall"]))
    return {
        "boxes": boxes,
        "repeats": repeats,
        "load": [load_start, load()],
        "figures": figures,
    }
