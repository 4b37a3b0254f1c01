"""The benchmark code runs (tiny sizes), so `make bench` cannot rot unnoticed.

Figures are not checked here (the machine may be busy); the benchmarks' own
plumbing is: helpers, target judging, the Temporal floor, the variants.
"""

from __future__ import annotations

import math
import uuid

import pytest

from bench import pool, respawn
from bench.__main__ import _clean, targets
from bench.common import ECHO, floor_gaps, pct, stamp_gaps_ms
from episodes.types.runtime import SubprocessConfig


def test_stats_and_target_judging() -> None:
    assert stamp_gaps_ms([{"t_ns": 0}, {"t_ns": 2_000_000}, {"t_ns": 5_000_000}]) == [2.0, 3.0]
    assert pct(list(range(1, 101)), 0.95) == 95
    assert math.isnan(pct([], 0.5))
    results = {
        "respawn": {"ratios": {"realistic": 150.0}},
        "pool": {"ratios": {"docker_box_cold_vs_warm": 50.0}},
        "density": {"figures": {"sessions": 1000, "worker_rss_per_session_mib": 0.5}},
    }
    judged = targets(results)
    assert judged["persistent_vs_respawn"]["met"] is True
    assert judged["pool_docker"]["met"] is False
    assert judged["density"]["met"] is True
    assert _clean({"x": [float("nan"), 1.0]}) == {"x": [None, 1.0]}


async def test_process_strategies_and_pool_measure() -> None:
    assert len(await respawn._persistent(ECHO, 3)) == 3
    assert len(await respawn._respawn(ECHO, 2)) == 2
    figures = await pool._measure(SubprocessConfig(), ECHO, 1)
    assert set(figures) == {"box_cold_ms", "box_warm_ms", "session_cold_ms", "session_warm_ms"}


async def test_the_floor_runs_in_every_mode(client) -> None:  # type: ignore[no-untyped-def]
    """bench/floor.py as the overhead benchmark runs it: its workflow on one queue, the
    no-op activity on that queue and another."""
    from temporalio.worker import Worker

    from bench.floor import FloorWorkflow, floor_noop

    queue, other = (f"bench-floor-{n}-{uuid.uuid4().hex[:6]}" for n in ("wf", "act"))
    workers = [
        Worker(client, task_queue=queue, workflows=[FloorWorkflow], activities=[floor_noop]),
        Worker(client, task_queue=other, activities=[floor_noop]),
    ]
    async with workers[0], workers[1]:
        for mode in ("cross", "same", "local"):
            assert len(await floor_gaps(client, 3, mode, queue, other)) == 2


def test_the_per_turn_target_is_judged_on_the_shipped_workflow() -> None:
    fig = {"median": {"median": 0.4}, "p95": {"median": 12.0}}
    judged = targets({"overhead": {"figures": {"temporal": fig}}})
    assert judged["overhead[shipped]"]["met"] is False
    fig["p95"]["median"] = 6.0
    assert targets({"overhead": {"figures": {"temporal": fig}}})["overhead[shipped]"]["met"]


async def test_viewer_bench_measures(client, worker, dev_server) -> None:  # type: ignore[no-untyped-def]
    """bench/viewer.py's plumbing on the session's server: a small batch, a short episode."""
    from bench import viewer
    from bench.common import ECHO, script_spec
    from episodes.client import EpisodesClient

    batch = await viewer._batch(client, "episodes-test", 3)
    spec = script_spec(60, ECHO, name=f"vbench-smoke-{uuid.uuid4().hex[:6]}")
    long = await EpisodesClient(client, task_queue="episodes-test").run_episode(spec, spec.tasks[0])
    figures = await viewer._measure(client, dev_server.ui_url, batch, long.workflow_id, 1)
    assert figures["batch_bytes"] > 0 and figures["episode_bytes"] > 0
    assert figures["history_bytes_all_runs"] > figures["episode_bytes"]  # 50 of 60 turns, clipped
    assert figures["runs"] == 1
    viewer._print({**figures, "episodes": 3, "turns": 60})


async def test_driver_events_measure() -> None:
    from bench import driver_events

    assert await driver_events._session_us_per_event(2, 50) > 0
    assert driver_events._decoder_us_per_event(50, 1) > 0


async def test_workflow_runner_bench_measures(client, dev_server) -> None:  # type: ignore[no-untyped-def]
    """bench/workflow_runner.py's 1-turn part on the session's server, one episode each way."""
    from bench import workflow_runner
    from bench.common import running
    from episodes.client import EpisodesClient
    from workers.worker import EpisodeWorker, WorkerOptions

    queues = {n: f"wr-smoke-{n}-{uuid.uuid4().hex[:6]}" for n in workflow_runner.RUNNERS}
    workers = {
        n: EpisodeWorker(client, WorkerOptions(task_queue=q, workflow_sandbox=n == "sandbox"))
        for n, q in queues.items()
    }
    async with running(workers["sandbox"]), running(workers["plain"]):
        eps = {n: EpisodesClient(client, task_queue=q) for n, q in queues.items()}
        one = await workflow_runner._one_turn(eps, dev_server.process.pid, 1)
    for n in workflow_runner.RUNNERS:
        assert one[n]["worker_cpu_ms_per_episode"] > 0


async def test_the_shipped_group_execution_variant_runs(client, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """`groups` (issue 32): the shipped group execution, 2 groups of 4, on a plain
    process; its ratio to in-process `isolation: none` is judged."""
    from bench import throughput
    from episodes.runtimes.sandbox.runtime import SandboxRuntime
    from workers.worker import EpisodeWorker, WorkerOptions

    async def no_box(self: SandboxRuntime) -> None:
        raise AssertionError("the groups variant runs on isolation: none")

    monkeypatch.setattr(SandboxRuntime, "start", no_box)
    monkeypatch.setattr(throughput, "GROUP_OF", 4)
    queue = f"bench-groups-{uuid.uuid4().hex[:6]}"
    worker = EpisodeWorker(client, WorkerOptions(task_queue=queue))
    async with throughput.running(worker):
        row = await throughput._batch(client, "groups", queue, 8, 2)
    assert row["turns_per_s"] > 0 and row["episodes"] == 8
    assert row["workflow_tasks_per_episode"] < 1  # one workflow's tasks shared by 4
    judged = targets({"throughput": {"ratios": {"groups_vs_in_process_plain": 0.79}}})
    assert judged["groups_vs_in_process_plain"]["met"] is False


async def test_throughput_runs_in_process_on_the_sandbox_and_on_a_plain_process(monkeypatch):
    """The two in-process variants run on the runtime each names, side by side
    (`ratios.sandbox_vs_plain_in_process`, issue 32)."""
    from bench import throughput
    from episodes.runtimes.sandbox.runtime import SandboxRuntime

    boxes: list[SandboxRuntime] = []
    start = SandboxRuntime.start

    async def counted(self: SandboxRuntime) -> None:
        boxes.append(self)
        await start(self)

    monkeypatch.setattr(SandboxRuntime, "start", counted)
    plain = await throughput._batch(None, "plain", "", 2, 2)
    assert plain["turns_per_s"] > 0 and boxes == []
    sandboxed = await throughput._batch(None, None, "", 2, 2)
    assert sandboxed["turns_per_s"] > 0 and len(boxes) == 2
    judged = targets({"throughput": {"ratios": {"sandbox_vs_plain_in_process": 0.9}}})
    assert judged["sandbox_vs_plain_in_process"]["met"] is True


async def test_box_cost_measures_both_runtimes() -> None:
    from bench import box_cost

    for config in box_cost.KINDS.values():
        figures = await box_cost._measure(config, 1)
        assert figures["wall_ms_per_box"] > 0 and figures["worker_cpu_ms_per_box"] >= 0


@pytest.mark.timeout(240)
async def test_density_quick_path_finishes_on_the_default_sandbox() -> None:
    """Its gate harness once waited forever for a host file the default sandbox could
    not see, and `make bench --quick` never finished (issue 32)."""
    from bench import density

    result = await density.run(quick=True)
    assert result["figures"]["sessions"] == 20
