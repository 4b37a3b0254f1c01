"""The correctness properties of the current design, checked on the prototype designs.

The end-to-end scenarios of tests/workflows, tests/workers and tests/episodes/session
(end to end, routing, exactly-once under a lost acknowledgement, worker SIGKILL,
cancellation) plus replay with no workflow cache,
against (c'1s) and (c'32) drive + batched Updates and (b) the child workflow with
local-activity turns. Not part of `make test`:

    .venv/bin/python -m pytest bench/designs/test_properties.py -q
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, OutboundInterceptor, StartWorkflowUpdateInput
from temporalio.client import Interceptor as ClientInterceptor
from temporalio.exceptions import ApplicationError
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

from bench.designs.worker import DesignWorker
from episodes.client.connect import connect
from episodes.payloads.settings import configured_data_converter
from episodes.types.io import EpisodeInput, EpisodeProgress
from episodes.types.results import EpisodeResult
from episodes.types.spec import EpisodeSpec, parse_spec

ROOT = Path(__file__).resolve().parents[2]
COUNTING = [sys.executable, str(ROOT / "tests" / "support" / "harnesses" / "counting_harness.py")]
REPL = ["{python}", "-m", "episodes.harness.reference.repl"]
SLOW = {"id": "slow", "data": {"snippets": ["x = 1", "import time; time.sleep(120)", "x"]}}
DESIGNS = ["UpdateLagEpisode", "UpdateAhead32Episode", "ChildLocalEpisode"]


def _spec(**over) -> EpisodeSpec:  # type: ignore[no-untyped-def]
    data = {
        "name": f"prop-{uuid.uuid4().hex[:6]}",
        "env": "script",
        "tasks": [{"id": "t0", "data": {"messages": ["a", "b", "c"]}}],
        "harness": {
            "command": ["{python}", "-m", "episodes.harness.reference.echo"],
            "ready_timeout_s": 30,
            "stop_timeout_s": 1,
        },
        "max_turns": 10,
        "turn_timeout_s": 30,
        "worker_lost_timeout_s": 3,
    }
    data.update(over)
    return parse_spec(data)


async def _start(client: Client, design: str, spec: EpisodeSpec, queue: str):  # type: ignore[no-untyped-def]
    return await client.start_workflow(
        design,
        EpisodeInput(spec=spec, task=spec.tasks[0]),
        id=f"{design}-{uuid.uuid4().hex[:8]}",
        task_queue=queue,
        result_type=EpisodeResult,
    )


@contextlib.asynccontextmanager
async def _workers(clients: list[Client], queue: str, **kw):  # type: ignore[no-untyped-def]
    workers = [DesignWorker(c, queue, **kw) for c in clients]
    async with contextlib.AsyncExitStack() as stack:
        for w in workers:
            await stack.enter_async_context(w.running())
        yield workers


async def _turns_done(handle, n: int) -> bool:  # type: ignore[no-untyped-def]
    with contextlib.suppress(Exception):
        p = await handle.query("progress", result_type=EpisodeProgress)
        return p.turns_done >= n
    return False


async def _until(pred, timeout: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await pred():
            return True
        await asyncio.sleep(0.1)
    return False


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize("design", DESIGNS)
async def test_episode_runs_scores_and_releases(client, design) -> None:  # type: ignore[no-untyped-def]
    queue = f"e2e-{uuid.uuid4().hex[:6]}"
    async with _workers([client], queue) as [w]:
        s = _spec(
            tasks=[{"id": "t0", "data": {"messages": ["a", "b", "c"], "expected": ["a", "x", "c"]}}]
        )
        handle = await _start(client, design, s, queue)
        result = await handle.result()
        assert result.termination == "env_done" and result.turns == 3
        assert result.reward is not None and abs(result.reward - 2 / 3) < 1e-9
        progress = await handle.query("progress", result_type=EpisodeProgress)
        assert [t.reply for t in progress.turns] == ["a", "b", "c"]
        assert len(w.registry) == 0
        capped = await (await _start(client, design, _spec(max_turns=2), queue)).result()
        assert capped.termination == "max_turns" and capped.turns == 2


@pytest.mark.parametrize("design", DESIGNS)
async def test_episode_survives_replay_on_every_workflow_task(client, design) -> None:  # type: ignore[no-untyped-def]
    # No workflow cache: every workflow task rebuilds the workflow from its history
    # (local activities not yet recorded run again; the session answers them unsent).
    queue = f"replay-{uuid.uuid4().hex[:6]}"
    async with _workers([client], queue, max_cached_workflows=0) as [w]:
        s = _spec(
            harness={"command": COUNTING, "ready_timeout_s": 30},
            tasks=[{"id": "t0", "data": {"messages": [f"m{i}" for i in range(6)]}}],
        )
        handle = await _start(client, design, s, queue)
        result = await handle.result()
        assert result.termination == "env_done" and result.turns == 6
        progress = await handle.query("progress", result_type=EpisodeProgress)
        assert [t.reply["received"] for t in progress.turns] == [1, 2, 3, 4, 5, 6]
        assert len(w.registry) == 0


@pytest.mark.parametrize("design", DESIGNS)
async def test_session_work_stays_on_the_provisioning_worker(dev_server, design) -> None:  # type: ignore[no-untyped-def]
    queue = f"route-{uuid.uuid4().hex[:6]}"
    clients = [await connect(dev_server.address) for _ in range(3)]
    async with _workers(clients[:2], queue) as workers:
        tasks = [{"id": f"t{i}", "data": {"messages": ["a", "b", "c", "d"]}} for i in range(8)]
        s = _spec(tasks=tasks)
        handles = [
            await clients[2].start_workflow(
                design,
                EpisodeInput(spec=s.model_copy(update={"tasks": [t]}), task=t),
                id=f"{design}-{uuid.uuid4().hex[:8]}",
                task_queue=queue,
                result_type=EpisodeResult,
            )
            for t in s.tasks
        ]
        results = await asyncio.gather(*(h.result() for h in handles))
        assert all(r.termination == "env_done" and r.turns == 4 for r in results)
        owner_of = {w.session_queue: w.worker_id for w in workers}
        owners = set()
        for h in handles:
            scheduled: dict[int, tuple[str, str]] = {}
            started: list[tuple[str, str, str]] = []
            async for ev in h.fetch_history_events():
                if ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                    a = ev.activity_task_scheduled_event_attributes
                    scheduled[ev.event_id] = (a.activity_type.name, a.task_queue.name)
                elif ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                    a = ev.activity_task_started_event_attributes
                    started.append((*scheduled[a.scheduled_event_id], a.identity))
            [owner] = [i.split("@")[0] for name, _, i in started if name == "provision"]
            owners.add(owner)
            rest = [x for x in started if x[0] != "provision"]
            assert rest, "session activities expected"
            for name, tq, identity in rest:
                assert owner_of.get(tq) == owner, f"{name} left its worker"
                assert identity == f"{owner}@session"
            # The child (design b) runs every workflow task on the owner's session worker.
            child = clients[2].get_workflow_handle(f"{h.id}:session")
            with contextlib.suppress(Exception):
                async for ev in child.fetch_history_events():
                    if ev.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
                        identity = ev.workflow_task_started_event_attributes.identity
                        assert identity == f"{owner}@session", identity
        assert owners == {w.worker_id for w in workers}  # both workers held sessions


class _LoseTurnOneOnce(Interceptor, ClientInterceptor):
    """Turn 1 reaches the harness and is recorded, then its acknowledgement is 'lost' once.

    Design (b): the local activity for turn 1 fails after running (it is retried).
    Design (c'): the Update carrying turn 1 lands, then the call fails: the drive
    activity fails and Temporal retries it from turn 0.
    """

    def __init__(self) -> None:
        self.injected = 0

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        outer = self

        class _In(ActivityInboundInterceptor):
            async def execute_activity(self, input: ExecuteActivityInput):  # type: ignore[no-untyped-def]
                result = await super().execute_activity(input)
                info = activity.info()
                if info.activity_type == "turn_local" and input.args[0].turn == 1:
                    if info.attempt == 1:
                        outer.injected += 1
                        raise ApplicationError("injected: the completion was lost")
                return result

        return _In(next)

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        outer = self

        class _Out(OutboundInterceptor):
            async def start_workflow_update(self, input: StartWorkflowUpdateInput):  # type: ignore[no-untyped-def]
                handle = await super().start_workflow_update(input)
                turns = (
                    [r.record.turn for r in input.args[0]] if input.update == "record_turns" else []
                )
                if 1 in turns and outer.injected == 0:
                    outer.injected += 1
                    await handle.result()  # it did land
                    raise ApplicationError("injected: the update response was lost")
                return handle

        return _Out(next)


@pytest.mark.parametrize("design", DESIGNS)
async def test_lost_acknowledgement_does_not_resend_a_turn(dev_server, design) -> None:  # type: ignore[no-untyped-def]
    queue = f"once-{uuid.uuid4().hex[:6]}"
    chaos = _LoseTurnOneOnce()
    worker_client = await Client.connect(
        dev_server.address, data_converter=configured_data_converter(), interceptors=[chaos]
    )
    async with _workers([worker_client], queue, interceptors=[chaos]):
        client = await connect(dev_server.address)
        s = _spec(
            harness={"command": COUNTING, "ready_timeout_s": 30},
            tasks=[{"id": "t0", "data": {"messages": ["m0", "m1", "m2"]}}],
        )
        handle = await _start(client, design, s, queue)
        result = await handle.result()
        assert chaos.injected == 1
        assert result.termination == "env_done" and result.turns == 3
        progress = await handle.query("progress", result_type=EpisodeProgress)
        assert [t.reply["received"] for t in progress.turns] == [1, 2, 3]
        assert [t.reply["message"] for t in progress.turns] == ["m0", "m1", "m2"]
        if design.startswith("Update"):  # the whole drive ran again, from turn 0
            attempts = [
                ev.activity_task_started_event_attributes.attempt
                async for ev in handle.fetch_history_events()
                if ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
            ]
            assert 2 in attempts


@pytest.mark.parametrize("design", DESIGNS)
async def test_worker_sigkilled_mid_episode_ends_worker_lost(dev_server, design) -> None:  # type: ignore[no-untyped-def]
    queue = f"lost-{uuid.uuid4().hex[:6]}"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench.designs.worker",
            "--address",
            dev_server.address,
            "--task-queue",
            queue,
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = await connect(dev_server.address)
    try:
        # The survivor runs workflows but takes no sessions: provision lands on `proc`.
        async with _workers([client], queue, max_sessions=0):
            s = _spec(
                env="python-repl",
                harness={"command": REPL, "ready_timeout_s": 30},
                tasks=[SLOW],
                turn_timeout_s=300,
            )
            handle = await _start(client, design, s, queue)
            # (b) shows turn 0 only when its workflow task is flushed (<= ~8 s).
            assert await _until(lambda: _turns_done(handle, 1), 60)
            harnesses = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
            assert harnesses
            killed = time.monotonic()
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            result = await asyncio.wait_for(handle.result(), 60)
            took = time.monotonic() - killed
            assert result.termination == "worker_lost", result
            assert result.turns == 1
            assert took < 30, took
            assert await _until(_async(lambda: not any(_alive(p) for p in harnesses)), 10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("design", DESIGNS)
async def test_cancelled_episode_releases_its_harness(client, design) -> None:  # type: ignore[no-untyped-def]
    queue = f"cancel-{uuid.uuid4().hex[:6]}"
    async with _workers([client], queue) as [w]:
        s = _spec(
            env="python-repl",
            harness={"command": REPL, "ready_timeout_s": 30},
            tasks=[SLOW],
            turn_timeout_s=300,
        )
        handle = await _start(client, design, s, queue)
        assert await _until(lambda: _turns_done(handle, 1), 60)
        [entry] = w.registry.entries()
        pid = entry.session.harness.pid
        assert pid and _alive(pid)
        await handle.cancel()
        result = await asyncio.wait_for(handle.result(), 60)
        assert result.termination == "cancelled"
        assert len(w.registry) == 0
        assert await _until(_async(lambda: not _alive(pid)), 10)


def _async(pred):  # type: ignore[no-untyped-def]
    async def check() -> bool:
        return pred()

    return check
