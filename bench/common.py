"""What every benchmark shares: a tuned dev server on free ports, specs, statistics."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import itertools
import math
import os
import resource
import statistics
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

from episodes.client.devserver import DevServer
from episodes.types.spec import EpisodeSpec, parse_spec

HERE = Path(__file__).resolve().parent
STAMP = [sys.executable, str(HERE / "harnesses" / "stamp.py")]
REALISTIC = [sys.executable, str(HERE / "harnesses" / "realistic.py")]
ECHO = [sys.executable, "-m", "episodes.harness.reference.echo"]


@contextlib.contextmanager
def dev_server(**extra: Any):
    """A tuned dev server (the embedded server's flags) on free ports, SQLite in a temp dir."""
    with tempfile.TemporaryDirectory(prefix="episodes-bench-") as tmp:
        server = DevServer(
            auto_port=True,
            headless=True,
            db_file=Path(tmp) / "temporal.db",
            log_file=Path(tmp) / "server.log",
            **extra,
        )
        server.start()
        try:
            yield server
        finally:
            server.stop()


@contextlib.asynccontextmanager
async def running(worker: Any) -> AsyncIterator[Any]:
    """Run an EpisodeWorker-like object (run()/request_stop()) for the block."""
    task = asyncio.create_task(worker.run())
    try:
        yield worker
    finally:
        worker.request_stop()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 60)


def script_spec(
    turns: int, command: list[str] | None = None, *, name: str = "bench", **over: Any
) -> EpisodeSpec:
    """A `script` episode of exactly `turns` turns (the env ends it after the last message)."""
    data: dict[str, Any] = {
        "name": f"{name}-{uuid.uuid4().hex[:8]}",
        "env": "script",
        "tasks": [{"id": "t0", "data": {"messages": [f"m{i}" for i in range(turns)]}}],
        "harness": {"command": command or STAMP, "ready_timeout_s": 60, "stop_timeout_s": 2},
        "max_turns": turns,
        "turn_timeout_s": 60,
        "worker_lost_timeout_s": 10,
    }
    data.update(over)
    return parse_spec(data)


def stamp_gaps_ms(replies: Iterable[Any]) -> list[float]:
    """Per-turn latency from the stamp harness: gap between consecutive turns' stamps."""
    stamps = [r["t_ns"] for r in replies]
    return [(b - a) / 1e6 for a, b in itertools.pairwise(stamps)]


def pct(values: list[float], q: float) -> float:
    """The q-quantile (0..1), nearest-rank; NaN for no values."""
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def summary(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "median": statistics.median(values) if values else float("nan"),
        "p95": pct(values, 0.95),
        "min": min(values) if values else float("nan"),
        "max": max(values) if values else float("nan"),
    }


def spread(values: list[float]) -> dict[str, float]:
    """Median and range of one figure over repeats."""
    return {
        "median": statistics.median(values) if values else float("nan"),
        "min": min(values) if values else float("nan"),
        "max": max(values) if values else float("nan"),
        "repeats": len(values),
    }


def fmt_spread(s: dict[str, float], unit: str = "", digits: int = 2) -> str:
    if s["repeats"] <= 1:
        return f"{s['median']:.{digits}f}{unit}"
    return f"{s['median']:.{digits}f}{unit} [{s['min']:.{digits}f}..{s['max']:.{digits}f}]"


def ratio(a: float, b: float) -> float:
    return a / b if b else float("inf")


def load() -> float:
    """1-minute load average: how noisy the machine was while we measured."""
    return os.getloadavg()[0]


def self_cpu() -> float:
    """This process's user+system CPU seconds (getrusage: finer than psutil's ticks)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def cpu_seconds(pid: int | None = None) -> float:
    """User+system CPU time of a process and its children (psutil), in seconds."""
    import psutil

    proc = psutil.Process(pid or os.getpid())
    t = proc.cpu_times()
    return t.user + t.system


# -- measuring episodes ----------------------------------------------------------------


async def direct_gaps(spec: EpisodeSpec) -> list[float]:
    """The episode's turns driven in-process (LiveSession, no Temporal): per-turn ms."""
    from episodes.session.live import LiveSession

    session = LiveSession(spec, spec.tasks[0], 0, f"direct-{uuid.uuid4().hex[:8]}")
    replies = []
    try:
        await session.open()
        for n in range(spec.max_turns):
            result = await session.turn(n)
            replies.append(result.record.reply)
            if result.observation.done:
                break
    finally:
        await session.close()
    return stamp_gaps_ms(replies)


async def episode_gaps(
    client: Any, workflow: str, spec: EpisodeSpec, task_queue: str
) -> tuple[list[float], float, Any]:
    """Run one episode of `workflow`; its per-turn gaps (ms), wall time (s), and result."""
    import time

    from episodes.types.io import EpisodeInput, EpisodeProgress
    from episodes.types.results import EpisodeResult

    started = time.perf_counter()
    handle = await client.start_workflow(
        workflow,
        EpisodeInput(spec=spec, task=spec.tasks[0]),
        id=f"{workflow}-{uuid.uuid4().hex[:10]}",
        task_queue=task_queue,
        result_type=EpisodeResult,
    )
    result = await handle.result()
    wall = time.perf_counter() - started
    progress = await handle.query("progress", result_type=EpisodeProgress)
    if result.turns != spec.max_turns:
        raise RuntimeError(f"{workflow}: {result.turns} turns, expected {spec.max_turns}")
    return stamp_gaps_ms(t.reply for t in progress.turns), wall, result


async def floor_gaps(
    client: Any, turns: int, mode: str, queue: str, other_queue: str
) -> list[float]:
    """The Temporal floor: a bare workflow doing `turns` no-op activities in `mode`."""
    stamps = await client.execute_workflow(
        "FloorWorkflow",
        args=[turns, mode, other_queue],
        id=f"floor-{mode}-{uuid.uuid4().hex[:10]}",
        task_queue=queue,
        result_type=list[int],
    )
    return [(b - a) / 1e6 for a, b in itertools.pairwise(stamps)]


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    out = ["  ".join(str(h).ljust(w) for h, w in zip(header, widths, strict=True))]
    out += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join("  " + line for line in out)


_TREE: Path | bool | None = False  # False: not tried yet


def _leave(base: Path, mine: Path) -> None:
    """Back into the cgroup this process came from, and its own removed."""
    with contextlib.suppress(OSError):
        (base / "cgroup.procs").write_text(str(os.getpid()))
        mine.rmdir()  # fails while a child lives in it: then the next run's reap


def tree_cpu() -> float | None:
    """CPU seconds of this process and everything it started, sandboxed processes
    included (whose exits `getrusage` never sees: a box ends by SIGKILL), or None where
    this machine cannot say. Through a cpuacct cgroup (v1) this process moves itself
    into at its first call: later children are in it too."""
    global _TREE
    if _TREE is False:
        _TREE = None
        with contextlib.suppress(OSError, ValueError):
            for line in Path("/proc/self/cgroup").read_text().splitlines():
                _, names, path = line.split(":", 2)
                if "cpuacct" in names.split(","):
                    base = Path("/sys/fs/cgroup") / names / path.lstrip("/")
                    if not base.exists():
                        base = Path("/sys/fs/cgroup/cpuacct") / path.lstrip("/")
                    mine = base / f"episodes-bench-{os.getpid()}"
                    mine.mkdir(exist_ok=True)
                    (mine / "cgroup.procs").write_text(str(os.getpid()))
                    _TREE = mine
                    atexit.register(_leave, base, mine)
    if not isinstance(_TREE, Path):
        return None
    try:
        return int((_TREE / "cpuacct.usage").read_text()) / 1e9
    except (OSError, ValueError):
        return None
