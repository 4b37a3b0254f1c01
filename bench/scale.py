"""A scale run on this machine (issue 44 §6): W worker processes and N concurrent live
episodes in the default sandbox, at N = 100, 500 and 1,000 side by side in one run.

Each size gets a fresh dev server and W fresh `episodes worker` processes (the
product's own command, each its own process as in a deployment), a warm-up of a few
short episodes, then N episodes of `turns` turns of `bench/harnesses/idle.py` (a
stdlib-builtins-only harness that thinks THINK_MS, uniform in [0.5, 1.5] x, then
answers) in `bubblewrap` boxes (`SubprocessConfig`, isolation `sandbox`).

"Live at once" is real: every episode's env (`bench/scale_env.py`, run in the workers)
holds it after turn 0 until a gate file appears, and drops a marker when it gets
there; the benchmark starts episodes keeping at most `starting` of them between
start and marker (so a box start is measured at a steady rate, not behind a queue of
N), and opens the gate once N markers are there. Then all N take their turns.

Measured per size:
- the server's CPU (the dev server process, user + system) over the ramp (N starts
  up to N live), over `idle_s` with all N live and idle at the barrier (per session
  per second: what holding a session costs), and over the turns (gate opened to all N
  done; each episode's end included): per episode and per turn; the workers' CPU the
  same way;
- worker RSS per session: the W workers' RSS summed with N live, minus the same
  after warm-up, over N; beside it the boxes' own memory (every process under the
  workers: bwrap, the box's init, the harness), PSS and USS per box, and their count;
- turn latency at the harness: from a reply leaving the harness to the next turn
  reaching it (everything the worker does between two turns: reading the reply, the
  env's step, recording, sending), p50 / p99 over turns 1.. that happened while all
  N sessions were live (before the first episode's last reply);
- box start: from the env's `box_config` (the worker about to ask the runtime for a
  box) to the harness's first line running in the box; and provision (to `reset`:
  the harness said ready), p50 / p99.

Stops early with the reason (memory, pids, starts that stopped coming) rather than
take the machine down: the result then says the N reached.

    make bench BENCH_ARGS=scale
    BENCH_SCALE_SIZES=100,500,1000 BENCH_SCALE_WORKERS=4 BENCH_SCALE_THINK_MS=5000 ...
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

from bench.common import HERE, dev_server, load, pct, table
from episodes.client.connect import connect
from episodes.lifetime import with_death_signal
from episodes.types.io import EpisodeInput
from episodes.types.results import EpisodeResult
from episodes.types.spec import EpisodeSpec, parse_spec

IDLE = [sys.executable, "-I", "-S", str(HERE / "harnesses" / "idle.py")]
ROOT = HERE.parent
MIB = 1024 * 1024
# Stop starting episodes when this little memory is left, or this share of pid_max used.
MIN_AVAILABLE = 2 * 1024 * MIB
MAX_PID_SHARE = 0.85


@dataclass
class Settings:
    sizes: tuple[int, ...] = (100, 500, 1000)
    workers: int = 4
    turns: int = 10
    # Mean think time: 1,000 sessions then offer 50 turns/s, ~1 core of server + workers
    # here (each turn of a slow harness is an Update of its own, ~19 ms of CPU).
    think_ms: float = 20000.0
    starting: int = 8  # episodes between their start and the barrier, at most
    warmup: int = 2  # short episodes per worker before the baseline
    stall_s: float = 300.0  # no new live session for this long: stop the ramp
    idle_s: float = 10.0  # all N live and idle at the barrier: measured this long

    @classmethod
    def from_env(cls, quick: bool) -> Settings:
        s = cls(sizes=(4, 8), workers=2, turns=3, think_ms=50.0, idle_s=1.0) if quick else cls()
        env = os.environ
        if "BENCH_SCALE_SIZES" in env:
            s.sizes = tuple(int(n) for n in env["BENCH_SCALE_SIZES"].split(","))
        for name in ("workers", "turns", "starting"):
            if f"BENCH_SCALE_{name.upper()}" in env:
                setattr(s, name, int(env[f"BENCH_SCALE_{name.upper()}"]))
        if "BENCH_SCALE_THINK_MS" in env:
            s.think_ms = float(env["BENCH_SCALE_THINK_MS"])
        return s


@dataclass
class Size:
    """What one size's run saw (raw; `figures` turns it into the report)."""

    asked: int
    live: int = 0
    stopped: str | None = None  # why the ramp stopped short of `asked`
    ramp_s: float = 0.0
    idle_s: float = 0.0
    turns_s: float = 0.0
    cpu: dict[str, float] = field(default_factory=dict)
    memory: dict[str, float] = field(default_factory=dict)
    per_worker: list[int] = field(default_factory=list)
    results: list[dict[str, Any]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


# -- the processes ----------------------------------------------------------------------


class Workers:
    """W `episodes worker` processes on one queue, logs in `logs`."""

    def __init__(self, address: str, queue: str, n: int, max_sessions: int, logs: Path) -> None:
        self.address, self.queue, self.n = address, queue, n
        self.max_sessions, self.logs = max_sessions, logs
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        }
        for i in range(self.n):
            argv = [
                sys.executable,
                "-m",
                "episodes.cli.main",
                "worker",
                "--address",
                self.address,
                "--task-queue",
                self.queue,
                "--max-sessions",
                str(self.max_sessions),
            ]
            log = open(self.logs / f"worker{i}.log", "wb")  # the child keeps it open
            self.procs.append(
                subprocess.Popen(
                    with_death_signal(argv, "TERM"),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    cwd=ROOT,
                    env=env,
                )
            )
            log.close()

    async def wait_started(self, timeout_s: float = 180) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            logs = [
                (self.logs / f"worker{i}.log").read_text(errors="replace") for i in range(self.n)
            ]
            if all("worker " in text and "queue" in text for text in logs):
                return
            for i, p in enumerate(self.procs):
                if p.poll() is not None:
                    raise RuntimeError(f"scale: worker {i} exited: {self.tail(i)}")
            if time.monotonic() > deadline:
                raise TimeoutError("scale: the workers did not start in time")
            await asyncio.sleep(0.5)

    def tail(self, i: int, lines: int = 5) -> str:
        text = (self.logs / f"worker{i}.log").read_text(errors="replace")
        return " | ".join(text.strip().splitlines()[-lines:])

    def processes(self) -> list[psutil.Process]:
        return [psutil.Process(p.pid) for p in self.procs if p.poll() is None]

    def stop(self, timeout_s: float = 90) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for p in self.procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)


def _cpu(procs: list[psutil.Process]) -> float:
    total = 0.0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            total += t.user + t.system
    return total


def _server_procs(server: Any) -> list[psutil.Process]:
    root = psutil.Process(server.process.pid)
    return [root, *root.children(recursive=True)]


def _memory(workers: Workers) -> dict[str, float]:
    """The workers' own RSS and threads, and every process under them (the boxes)."""
    out: dict[str, float] = {"worker_rss": 0.0, "worker_threads": 0, "box_procs": 0}
    out.update(box_rss=0.0, box_pss=0.0, box_uss=0.0)
    for w in workers.processes():
        with contextlib.suppress(psutil.Error):
            out["worker_rss"] += w.memory_info().rss
            out["worker_threads"] += w.num_threads()
        for child in w.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                info = child.memory_full_info()
                out["box_procs"] += 1
                out["box_rss"] += info.rss
                out["box_pss"] += getattr(info, "pss", 0)
                out["box_uss"] += info.uss
    return out


# -- one size ---------------------------------------------------------------------------


def _spec(
    s: Settings, n: int, tmp: Path, *, gated: bool, turns: int, think_ms: float
) -> EpisodeSpec:
    return parse_spec(
        {
            "name": f"scale{n}-{uuid.uuid4().hex[:6]}",
            "env": "bench.scale_env:ScaleEnv",
            "env_args": {
                "gate": str(tmp / "gate") if gated else "",
                "ready": str(tmp / "ready"),
                "turns": turns,
            },
            "tasks": [{"id": "t0"}],
            "harness": {
                "command": IDLE,
                "env": {"THINK_MS": str(think_ms)},
                "ready_timeout_s": 300,
                "stop_timeout_s": 2,
                "runtime": {"type": "subprocess", "isolation": "sandbox"},
            },
            "max_turns": turns,
            "turn_timeout_s": 3600,
            "worker_lost_timeout_s": 60,
        }
    )


async def _start(client: Any, spec: EpisodeSpec, queue: str, i: int) -> asyncio.Task[Any]:
    handle = await client.start_workflow(
        "EpisodeWorkflow",
        EpisodeInput(spec=spec, task=spec.tasks[0], sample=i),
        id=f"{spec.name}.s{i}",
        task_queue=queue,
        result_type=EpisodeResult,
    )
    return asyncio.ensure_future(handle.result())


def tasks_in_use() -> int:
    """Processes and threads on the machine (each takes a pid): /proc/loadavg's total."""
    return int(Path("/proc/loadavg").read_text().split()[3].split("/")[1])


def _stop_reason(workers: Workers) -> str | None:
    vm = psutil.virtual_memory()
    if vm.available < MIN_AVAILABLE:
        return f"memory: {vm.available / MIB:.0f} MiB available (< {MIN_AVAILABLE / MIB:.0f})"
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    if (tasks := tasks_in_use()) > MAX_PID_SHARE * pid_max:
        return f"pids: {tasks} tasks of pid_max {pid_max}"
    for i, p in enumerate(workers.procs):
        if p.poll() is not None:
            return f"worker {i} exited ({p.returncode}): {workers.tail(i)}"
    return None


async def _size(s: Settings, n: int, say: Any) -> Size:
    out = Size(asked=n)
    queue = f"scale-{uuid.uuid4().hex[:6]}"
    per_worker_max = math.ceil(n / s.workers) + max(16, n // (4 * s.workers))
    with dev_server() as server, tempfile.TemporaryDirectory(prefix="episodes-scale-") as t:
        tmp = Path(t)
        (tmp / "ready").mkdir()
        (tmp / "logs").mkdir()
        workers = Workers(server.address, queue, s.workers, per_worker_max, tmp / "logs")
        workers.start()
        try:
            client = await connect(server.address, timeout_s=30)
            await workers.wait_started()
            warm = _spec(s, n, tmp, gated=False, turns=3, think_ms=0)
            for r in await asyncio.gather(
                *[await _start(client, warm, queue, i) for i in range(s.warmup * s.workers)]
            ):
                if r.termination != "env_done":
                    raise RuntimeError(f"scale: a warm-up episode ended {r.termination}: {r.error}")
            for f in (tmp / "ready").iterdir():
                f.unlink()
            await asyncio.sleep(2)  # the warm-up's sessions released, boxes gone
            server_procs = _server_procs(server)
            worker_procs = workers.processes()
            base = _memory(workers)
            cpu0 = (_cpu(server_procs), _cpu(worker_procs))
            tasks = await _ramp(s, n, client, queue, tmp, workers, out, say)
            await asyncio.sleep(2)  # let allocations settle
            at_n = _memory(workers)
            cpu1 = (_cpu(server_procs), _cpu(worker_procs))
            out.per_worker = sorted(
                Counter(f.name.split("-")[0] for f in (tmp / "ready").iterdir()).values()
            )
            out.memory = {
                "worker_rss_base": base["worker_rss"],
                **at_n,
                "available": psutil.virtual_memory().available,
                "pid_tasks": tasks_in_use(),
            }
            say(
                f"  {out.live} live: workers RSS {base['worker_rss'] / MIB:.0f} -> "
                f"{at_n['worker_rss'] / MIB:.0f} MiB, boxes {at_n['box_procs']} processes, "
                f"PSS {at_n['box_pss'] / MIB:.0f} MiB; {s.idle_s:.0f} s idle, then the gate"
            )
            # All N live and idle at the barrier: what holding them costs (the workers'
            # per-box limit watches, the SDK's polls), before any turn.
            t_idle = time.monotonic()
            await asyncio.sleep(s.idle_s)
            out.idle_s = time.monotonic() - t_idle
            cpu_idle = (_cpu(server_procs), _cpu(worker_procs))
            t0 = time.monotonic()
            (tmp / "gate").touch()
            limit = s.turns * s.think_ms / 1000 * 1.5 * 3 + 600
            done = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), limit)
            out.turns_s = time.monotonic() - t0
            cpu2 = (_cpu(server_procs), _cpu(worker_procs))
            out.cpu = {
                "server_ramp": cpu1[0] - cpu0[0],
                "server_idle": cpu_idle[0] - cpu1[0],
                "server_turns": cpu2[0] - cpu_idle[0],
                "workers_ramp": cpu1[1] - cpu0[1],
                "workers_idle": cpu_idle[1] - cpu1[1],
                "workers_turns": cpu2[1] - cpu_idle[1],
            }
            for r in done:
                if isinstance(r, BaseException):
                    out.failures.append(f"{type(r).__name__}: {r}")
                elif r.termination != "env_done":
                    out.failures.append(f"{r.termination}: {r.error}")
                else:
                    out.results.append(r.score_details)
            say(f"  all done in {out.turns_s:.1f} s; {len(out.failures)} failed")
        finally:
            (tmp / "gate").touch()
            workers.stop()
    return out


async def _ramp(
    s: Settings, n: int, client: Any, queue: str, tmp: Path, workers: Workers, out: Size, say: Any
) -> list[asyncio.Task[Any]]:
    """Start n gated episodes, at most `starting` between start and barrier at a time,
    until n are live or something says stop: their results' tasks."""
    spec = _spec(s, n, tmp, gated=True, turns=s.turns, think_ms=s.think_ms)
    tasks: list[asyncio.Task[Any]] = []
    ready = tmp / "ready"
    t0 = last_progress = last_print = last_check = time.monotonic()
    live = 0
    while True:
        now_live = sum(1 for _ in ready.iterdir())
        if now_live > live:
            live, last_progress = now_live, time.monotonic()
        failed = [t for t in tasks if t.done()]
        if live + len(failed) >= n:
            break
        reason = None
        if time.monotonic() - last_check > 1:
            last_check = time.monotonic()
            reason = _stop_reason(workers)
        if reason is None and time.monotonic() - last_progress > s.stall_s:
            reason = f"no new live session for {s.stall_s:.0f} s"
        if reason is None and failed:
            t = failed[0]
            why = t.exception() if not t.cancelled() else "cancelled"
            reason = f"an episode ended before the barrier: {why!r}"[:300]
        if reason:
            out.stopped = reason
            say(f"  stopping the ramp at {live} live: {reason}")
            break
        while len(tasks) < n and len(tasks) - live - len(failed) < s.starting:
            tasks.append(await _start(client, spec, queue, len(tasks)))
        if time.monotonic() - last_print > 10:
            last_print = time.monotonic()
            say(
                f"  ramp: {live}/{n} live after {last_print - t0:.0f} s, "
                f"{psutil.virtual_memory().available / MIB / 1024:.1f} GiB available, "
                f"load {load():.1f}"
            )
        await asyncio.sleep(0.1)
    out.live = live
    out.ramp_s = time.monotonic() - t0
    return tasks


# -- figures ----------------------------------------------------------------------------


def figures(s: Settings, run: Size) -> dict[str, Any]:
    """One size's report: the figures the issue names, and what they rest on."""
    res = run.results
    box = [(r["start_ns"] - r["box_ns"]) / 1e6 for r in res]
    provision = [(r["reset_ns"] - r["box_ns"]) / 1e6 for r in res]
    # All N live until the first episode's last reply: turns measured before it.
    end = min((r["turns"][-1][1] for r in res), default=0)
    live_gaps, all_gaps = [], []
    for r in res:
        turns = r["turns"]
        for k in range(1, len(turns) - 1):  # turn 0 -> 1 holds the barrier
            gap = (turns[k + 1][0] - turns[k][1]) / 1e6
            all_gaps.append(gap)
            if turns[k + 1][0] <= end:
                live_gaps.append(gap)
    n = max(1, run.live)
    turns_after_gate = max(1, len(res) * (s.turns - 1))
    mem = run.memory
    cpu = run.cpu
    return {
        "sessions": run.live,
        "asked": run.asked,
        "stopped": run.stopped,
        "failed": len(run.failures),
        "failures": run.failures[:5],
        "per_worker_sessions": run.per_worker,
        "ramp_s": run.ramp_s,
        "starts_per_s": run.live / run.ramp_s if run.ramp_s else 0.0,
        "turns_phase_s": run.turns_s,
        "turns_per_s": len(res) * (s.turns - 1) / run.turns_s if run.turns_s else 0.0,
        "server_cpu_s": cpu.get("server_ramp", 0) + cpu.get("server_turns", 0),
        "server_cpu_ms_per_episode": 1e3
        * (cpu.get("server_ramp", 0) + cpu.get("server_turns", 0))
        / n,
        "server_cpu_ms_per_start": 1e3 * cpu.get("server_ramp", 0) / n,
        "server_cpu_ms_per_turn": 1e3 * cpu.get("server_turns", 0) / turns_after_gate,
        "workers_cpu_ms_per_start": 1e3 * cpu.get("workers_ramp", 0) / n,
        "server_idle_cpu_ms_per_session_s": _per_session_s(cpu.get("server_idle", 0), run),
        "workers_idle_cpu_ms_per_session_s": _per_session_s(cpu.get("workers_idle", 0), run),
        "workers_cpu_ms_per_turn": 1e3 * cpu.get("workers_turns", 0) / turns_after_gate,
        "worker_rss_base_mib": mem.get("worker_rss_base", 0) / MIB,
        "worker_rss_mib": mem.get("worker_rss", 0) / MIB,
        "worker_rss_per_session_mib": (mem.get("worker_rss", 0) - mem.get("worker_rss_base", 0))
        / n
        / MIB,
        "worker_threads": mem.get("worker_threads", 0),
        "box_processes_per_session": mem.get("box_procs", 0) / n,
        "box_pss_per_session_mib": mem.get("box_pss", 0) / n / MIB,
        "box_uss_per_session_mib": mem.get("box_uss", 0) / n / MIB,
        "box_rss_per_session_mib": mem.get("box_rss", 0) / n / MIB,
        "pid_tasks": mem.get("pid_tasks", 0),
        "available_mib": mem.get("available", 0) / MIB,
        "turn_ms": _quantiles(live_gaps),
        "turn_ms_all": _quantiles(all_gaps),
        "box_start_ms": _quantiles(box),
        "provision_ms": _quantiles(provision),
        "sandboxed": all(0 < r.get("harness_pid", 0) < 100 for r in res) if res else None,
    }


def _per_session_s(cpu_s: float, run: Size) -> float:
    """CPU ms per live session per second of the idle window."""
    return 1e3 * cpu_s / (run.live * run.idle_s) if run.live and run.idle_s else float("nan")


def _quantiles(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50": statistics.median(values) if values else float("nan"),
        "p99": pct(values, 0.99),
        "max": max(values) if values else float("nan"),
    }


# What the table shows: (label, key, sub-key or None, unit, digits). Per-unit figures
# stay flat when the total grows linearly with N.
ROWS = [
    ("sessions live at once", "sessions", None, "", 0),
    ("ramp: starts/s", "starts_per_s", None, "", 1),
    ("server CPU ms / episode", "server_cpu_ms_per_episode", None, "", 1),
    ("server CPU ms / start", "server_cpu_ms_per_start", None, "", 1),
    ("server CPU ms / turn (+ ends)", "server_cpu_ms_per_turn", None, "", 2),
    ("server CPU ms / session-s idle", "server_idle_cpu_ms_per_session_s", None, "", 3),
    ("workers CPU ms / start", "workers_cpu_ms_per_start", None, "", 1),
    ("workers CPU ms / session-s idle", "workers_idle_cpu_ms_per_session_s", None, "", 3),
    ("workers CPU ms / turn (+ ends)", "workers_cpu_ms_per_turn", None, "", 2),
    ("worker RSS MiB / session", "worker_rss_per_session_mib", None, "", 3),
    ("box PSS MiB / session", "box_pss_per_session_mib", None, "", 2),
    ("box USS MiB / session", "box_uss_per_session_mib", None, "", 2),
    ("box processes / session", "box_processes_per_session", None, "", 1),
    ("turn ms p50", "turn_ms", "p50", "", 2),
    ("turn ms p99", "turn_ms", "p99", "", 1),
    ("box start ms p50", "box_start_ms", "p50", "", 1),
    ("box start ms p99", "box_start_ms", "p99", "", 1),
    ("provision ms p50", "provision_ms", "p50", "", 1),
    ("provision ms p99", "provision_ms", "p99", "", 1),
]


def _value(fig: dict[str, Any], key: str, sub: str | None) -> float:
    v = fig.get(key)
    if sub is not None:
        v = (v or {}).get(sub)
    return float(v) if isinstance(v, int | float) else float("nan")


def ratios(by_size: dict[int, dict[str, Any]]) -> dict[str, float]:
    """Each table figure at the largest size over the smallest (1.0: grows linearly in
    total for the per-unit figures, stays flat for the latencies)."""
    if len(by_size) < 2:
        return {}
    lo, hi = by_size[min(by_size)], by_size[max(by_size)]
    out = {}
    for _, key, sub, _, _ in ROWS[1:]:
        a, b = _value(lo, key, sub), _value(hi, key, sub)
        out[f"{key}.{sub}" if sub else key] = b / a if a else float("nan")
    return out


def report(by_size: dict[int, dict[str, Any]], rat: dict[str, float]) -> str:
    sizes = sorted(by_size)
    header = ["figure", *[f"N={n}" for n in sizes]]
    if rat:
        header.append(f"{sizes[-1]}/{sizes[0]}")
    rows = []
    for label, key, sub, _, digits in ROWS:
        row = [label, *[f"{_value(by_size[n], key, sub):.{digits}f}" for n in sizes]]
        if rat:
            r = rat.get(f"{key}.{sub}" if sub else key)
            if r is None:
                row.append(f"{sizes[-1] / sizes[0]:.0f}x (N)")
            else:  # NaN: nothing to compare against (a zero at the smallest size)
                row.append(f"{r:.2f}x" if math.isfinite(r) else "n/a")
        rows.append(row)
    return table(rows, header)


async def run(quick: bool = False, repeats: int | None = None) -> dict[str, Any]:
    s = Settings.from_env(quick)
    return await measure(s)


async def measure(s: Settings, say: Any = None) -> dict[str, Any]:
    say = say or (lambda line: print(line, flush=True))
    load_start = load()
    say(
        f"scale: {s.workers} workers, sizes {list(s.sizes)}, {s.turns} turns, think "
        f"{s.think_ms:.0f} ms, <= {s.starting} starting at once; load {load_start:.1f}, "
        f"{psutil.virtual_memory().available / MIB / 1024:.1f} GiB available"
    )
    by_size: dict[int, dict[str, Any]] = {}
    per_session_mib = 0.0
    for n in s.sizes:
        need = n * per_session_mib * MIB
        if need and need > psutil.virtual_memory().available - MIN_AVAILABLE:
            say(f"N={n}: skipped, it would need ~{need / MIB:.0f} MiB (measured per session)")
            by_size[n] = {"sessions": 0, "asked": n, "stopped": "memory (predicted)"}
            continue
        say(f"N={n}: ramp")
        run_ = await _size(s, n, say)
        if os.environ.get("BENCH_SCALE_RAW"):  # every stamp, for a closer look
            Path(f"{os.environ['BENCH_SCALE_RAW']}-{n}.json").write_text(json.dumps(run_.results))
        fig = figures(s, run_)
        by_size[n] = fig
        per_session_mib = fig["worker_rss_per_session_mib"] + fig["box_pss_per_session_mib"]
        if run_.stopped:
            say(f"N={n}: reached {run_.live} live, then stopped: {run_.stopped}")
    measured = {n: f for n, f in by_size.items() if f.get("sessions")}
    rat = ratios(measured)
    say(report(measured, rat))
    return {
        "load": [load_start, load()],
        "settings": asdict(s),
        "figures": {str(n): f for n, f in by_size.items()},
        "ratios": rat,
    }
