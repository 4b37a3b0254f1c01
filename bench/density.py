"""Density: many live subprocess sessions held by one worker, then one turn each.

Through the real stack: N episodes (`EpisodeWorkflow` on an in-process
`EpisodeWorker`) whose harness (bench/harnesses/gate.py) blocks in turn 0 until a
gate file appears, so N live harnesses sit idle in the worker at once. Measured:
- worker RSS per session: this process's RSS with N sessions live minus before,
  over N (worker + its workflow cache + the client; the harnesses are separate
  processes, reported on their own);
- turn latency at that density: a probe episode's per-turn gaps with the N sessions
  live vs with none (same run);
- the burst: open the gate and every session finishes its turn; wall time until all
  N episodes are done.
"""

from __future__ import annotations

import asyncio
import gc
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import psutil

from bench.common import (
    HERE,
    STAMP,
    dev_server,
    episode_gaps,
    load,
    ratio,
    running,
    script_spec,
    summary,
)
from episodes.client.connect import connect
from episodes.types.io import EpisodeInput
from episodes.types.results import EpisodeResult
from workers.worker import EpisodeWorker, WorkerOptions

GATE = [sys.executable, "-I", "-S", str(HERE / "harnesses" / "gate.py")]
MIB = 1024 * 1024


def _rss() -> int:
    gc.collect()
    return psutil.Process().memory_info().rss


def _in_turn(worker: EpisodeWorker) -> int:
    # Read-only peek: a session whose turn 0 was sent is idle in the harness now.
    return sum(1 for e in worker.registry.entries() if e.session._next_turn >= 1)


def _harness_memory(worker: EpisodeWorker) -> tuple[float, float]:
    """Mean RSS and USS (MiB) of the live harness processes."""
    rss, uss = [], []
    for e in worker.registry.entries():
        pid = e.session.harness.pid if e.session.harness else None
        try:
            info = psutil.Process(pid).memory_full_info()
        except (psutil.Error, TypeError, ValueError):
            continue
        rss.append(info.rss / MIB)
        uss.append(info.uss / MIB)
    return (sum(rss) / len(rss) if rss else 0.0, sum(uss) / len(uss) if uss else 0.0)


class _Watchdog(threading.Thread):
    """Unfreezes the event loop if a forked harness deadlocks before exec.

    `subprocess.Popen` blocks the loop until the child execs; a child forked with a
    `preexec_fn` from a many-threaded process can deadlock before exec (Python's
    documented hazard), freezing the whole worker. If the loop stops ticking for
    `limit_s`, children still running our own command line (forked, never exec'd) are
    killed by pid, which unblocks Popen; the benchmark then fails with the reason.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, limit_s: float = 60.0) -> None:
        super().__init__(daemon=True)
        self.loop, self.limit_s = loop, limit_s
        self.last = time.monotonic()
        self.killed: list[int] = []
        self.done = threading.Event()
        loop.call_soon_threadsafe(self._tick)

    def _tick(self) -> None:
        self.last = time.monotonic()
        if not self.done.is_set():
            self.loop.call_later(1.0, self._tick)

    def run(self) -> None:
        me = psutil.Process()
        while not self.done.wait(5):
            if time.monotonic() - self.last < self.limit_s:
                continue
            for child in me.children():
                try:
                    if child.cmdline() == me.cmdline():
                        child.kill()
                        self.killed.append(child.pid)
                except psutil.Error:
                    pass


async def _wait(pred, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise TimeoutError(f"density: timed out waiting for {what}")
        await asyncio.sleep(0.5)


async def run(quick: bool = False, repeats: int | None = None) -> dict:
    sessions = 20 if quick else 1000
    probe_turns = 10 if quick else 30
    queue = f"dens-{uuid.uuid4().hex[:6]}"
    load_start = load()
    with dev_server() as server, tempfile.TemporaryDirectory() as tmp:
        gate = Path(tmp) / "open"
        client = await connect(server.address, timeout_s=30)
        worker = EpisodeWorker(client, WorkerOptions(task_queue=queue, max_sessions=sessions + 16))
        async with running(worker):
            await episode_gaps(client, "EpisodeWorkflow", script_spec(3, STAMP), queue)
            idle_probe, _, _ = await episode_gaps(
                client, "EpisodeWorkflow", script_spec(probe_turns, STAMP), queue
            )
            rss0, threads0 = _rss(), psutil.Process().num_threads()
            spec = script_spec(
                2,
                name="dense",
                harness={
                    "command": GATE,
                    "env": {"GATE_FILE": str(gate)},
                    "ready_timeout_s": 300,
                    # The default runtime is a sandbox: the gate's directory is bound in
                    # (read-only), or the harness would wait for a file it cannot see.
                    "runtime": {"type": "subprocess", "ro_paths": [tmp]},
                },
                turn_timeout_s=1800,
                worker_lost_timeout_s=60,
            )
            watchdog = _Watchdog(asyncio.get_running_loop())
            watchdog.start()
            t0 = time.perf_counter()
            handles = []
            for i in range(0, sessions, 50):  # start in waves: the server is one process too
                handles += await asyncio.gather(
                    *(
                        client.start_workflow(
                            "EpisodeWorkflow",
                            EpisodeInput(spec=spec, task=spec.tasks[0], sample=j),
                            id=f"{spec.name}.s{j}",
                            task_queue=queue,
                            result_type=EpisodeResult,
                        )
                        for j in range(i, min(sessions, i + 50))
                    )
                )
            await _wait(
                lambda: _in_turn(worker) >= sessions or watchdog.killed,
                60 + sessions,
                "sessions to start",
            )
            if watchdog.killed:
                gate.touch()  # let every episode finish, then report
                await asyncio.gather(*(h.result() for h in handles), return_exceptions=True)
                watchdog.done.set()
                raise RuntimeError(
                    f"the worker's event loop froze: {len(watchdog.killed)} forked harness "
                    f"process(es) deadlocked before exec (pids {watchdog.killed}, killed); "
                    "see episodes/runtimes/subprocess.py: preexec_fn in a threaded process"
                )
            ramp_s = time.perf_counter() - t0
            await asyncio.sleep(2)  # let allocations settle
            rss1, threads1 = _rss(), psutil.Process().num_threads()
            h_rss, h_uss = _harness_memory(worker)
            dense_probe, _, _ = await episode_gaps(
                client, "EpisodeWorkflow", script_spec(probe_turns, STAMP), queue
            )
            t1 = time.perf_counter()
            gate.touch()
            results = await asyncio.gather(*(h.result() for h in handles))
            burst_s = time.perf_counter() - t1
            bad = [r for r in results if r.termination != "env_done"]
            if bad:
                raise RuntimeError(f"density: {len(bad)} episodes ended badly, e.g. {bad[0]}")
            await _wait(lambda: len(worker.registry) == 0, 60, "sessions to be released")
            watchdog.done.set()

    per_session = (rss1 - rss0) / sessions / MIB
    idle, dense = summary(idle_probe), summary(dense_probe)
    figures = {
        "sessions": sessions,
        "ramp_s": ramp_s,
        "worker_rss_before_mib": rss0 / MIB,
        "worker_rss_with_sessions_mib": rss1 / MIB,
        "worker_rss_per_session_mib": per_session,
        "worker_threads": [threads0, threads1],
        "harness_rss_mib": h_rss,
        "harness_uss_mib": h_uss,
        "probe_turn_ms_idle_worker": idle,
        "probe_turn_ms_dense_worker": dense,
        "burst_s": burst_s,
        "burst_turns_per_s": sessions / burst_s,
    }
    ratios = {"dense_vs_idle_turn_median": ratio(dense["median"], idle["median"])}
    print(f"density: {sessions} live subprocess sessions on one worker")
    print(
        f"  started in {ramp_s:.1f} s; worker RSS {rss0 / MIB:.0f} -> {rss1 / MIB:.0f} MiB: "
        f"{per_session:.2f} MiB per session; threads {threads0} -> {threads1}"
    )
    print(f"  each harness process: RSS {h_rss:.1f} MiB, USS {h_uss:.1f} MiB")
    print(
        f"  probe episode per-turn: median {idle['median']:.1f} ms / p95 {idle['p95']:.1f} ms "
        f"alone, {dense['median']:.1f} / {dense['p95']:.1f} ms with {sessions} live sessions "
        f"({ratios['dense_vs_idle_turn_median']:.2f}x)"
    )
    print(
        f"  burst: all {sessions} take their turn and finish in {burst_s:.1f} s "
        f"({figures['burst_turns_per_s']:.0f} episodes/s)"
    )
    return {"load": [load_start, load()], "figures": figures, "ratios": ratios}
