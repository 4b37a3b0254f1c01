"""A worker's box caps through Temporal (issue 44 §2): past the cap an episode waits for
a box, seen as waiting by the batch's live figure, and runs when a box is given back;
a spec that lists a spillover runtime runs there instead, and its result says so.

Real parts: the session's dev server, a worker of the test's own with a cap of one
subprocess box, the chatty harness and a scripted upstream that holds its model call
until the test lets go (so "the box is held" is the test's doing, not timing).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from prometheus_client import generate_latest

from activities import telemetry
from episodes.client import EpisodesClient
from episodes.client.batch.live import LiveFigure, live_figure
from episodes.model.scripted.server import ScriptedUpstream, echo_policy
from episodes.types.results import EpisodeResult
from episodes.types.runtime import BoxCap
from episodes.types.spec import EpisodeSpec
from tests.conftest import ROOT
from tests.support.backends import docker as backend
from tests.support.backends import require
from tests.support.helpers import spec, wait_until

pytestmark = pytest.mark.timeout(300)

CHATTY = [sys.executable, str(ROOT / "tests" / "support" / "harnesses" / "chatty_harness.py")]


@contextlib.asynccontextmanager
async def capped_worker(client: Any, caps: dict[str, BoxCap]) -> AsyncIterator[Any]:
    """A worker of the test's own on a fresh queue, with room for 4 sessions and `caps`."""
    from workers.worker import EpisodeWorker, WorkerOptions

    w = EpisodeWorker(
        client,
        WorkerOptions(
            task_queue=f"caps-{uuid.uuid4().hex[:6]}",
            max_sessions=4,
            reap_interval_s=2,
            provision_breaker_after=0,
            box_caps=caps,
        ),
    )
    task = asyncio.create_task(w.run())
    try:
        yield w
    finally:
        w.request_stop()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 60)


def _held(base_url: str, n: int, **harness: Any) -> EpisodeSpec:
    """n one-turn episodes, each holding its box through one model call the upstream
    holds until the test lets go."""
    tasks = [{"id": f"t{i}", "data": {"messages": ["same"]}} for i in range(n)]
    return spec(
        name=f"caps-{uuid.uuid4().hex[:6]}",
        tasks=tasks,
        command=CHATTY,
        # Held calls wait, they do not time out (see tests/episodes/client/test_live.py).
        harness={
            "env": {"CHATTY_CALLS": "1", "CHATTY_TIMEOUT_S": "240"},
            "ready_timeout_s": 30,
            **harness,
        },
        model={"upstreams": [{"base_url": base_url, "max_concurrency": 8}], "model": "scripted"},
        turn_timeout_s=240,
        concurrency=n,
    )


async def test_a_worker_takes_no_provision_while_one_waits_at_its_caps() -> None:
    """The slot supplier's side alone: room until a provision waits at a cap, room
    again once it has its box (whatever the runtime: the next provision's is unknown)."""
    from episodes.runtimes.caps import BoxCaps
    from episodes.session.registry import SessionRegistry
    from workers.backpressure import SessionSlots

    caps = BoxCaps({"docker": BoxCap(running=1)})
    slots = SessionSlots(SessionRegistry(max_sessions=8), box_wait=lambda: caps.waiting > 0)
    held, _ = await caps.acquire(["docker"])
    assert slots._has_room(), "a full runtime alone does not stop the worker"
    waiter = asyncio.ensure_future(caps.acquire(["docker"]))
    assert await wait_until(lambda: caps.waiting == 1)
    assert not slots._has_room()
    held.release()
    slot, _ = await waiter
    assert slots._has_room()
    slot.release()


async def test_past_the_cap_an_episode_waits_for_a_box_and_runs_when_one_is_given_back(
    client,
) -> None:
    """A cap of one subprocess box and a batch of two: the first holds the box (its call
    held upstream), the second's provision is taken and waits at the cap, which the
    live figure counts as waiting for a box. Let go: the first ends, gives its box back,
    and the second runs on it."""
    release = asyncio.Event()

    async def gate(request: dict[str, Any]) -> None:
        await release.wait()

    async with (
        capped_worker(client, {"subprocess": BoxCap(running=1)}) as worker,
        ScriptedUpstream(policy=echo_policy, gate=gate) as up,
    ):
        ec = EpisodesClient(client, task_queue=worker.options.task_queue)
        batch = _held(up.base_url, 2)

        async def drive() -> list[EpisodeResult]:
            return [r async for r in ec.run_batch(batch)]

        driving = asyncio.ensure_future(drive())
        try:
            # One box, held; the other provision taken by the worker, waiting at the cap.
            caps = worker.pools.caps
            assert await wait_until(
                lambda: len(up.chat_requests) == 1 and caps.waiting == 1, timeout=120
            ), (len(up.chat_requests), caps.counts())
            assert caps.counts()["subprocess"]["running"] == 1
            assert len(worker.registry) == 1
            # ...and no longer polling for provisions meanwhile, which its metrics say.
            assert not worker.slots._has_room()
            series = f'episodes_box_waits{{worker="{worker.worker_id}"}} 1.0'.encode()
            assert series in generate_latest(telemetry.REGISTRY)
            waiting = LiveFigure(running=2, waiting=1)
            ok = await wait_until(lambda: _figure(client, batch.name, waiting), timeout=60)
            assert ok, await live_figure(client, batch.name)
        finally:
            release.set()
        results = await asyncio.wait_for(driving, 180)
    assert [r.termination for r in results] == ["env_done"] * 2, [r.error for r in results]
    assert [r.runtime for r in results] == ["subprocess"] * 2
    assert len(up.chat_requests) == 2
    assert caps.counts()["subprocess"]["running"] == 0 and caps.waiting == 0


@pytest.mark.docker
async def test_a_spec_with_a_spillover_runtime_runs_where_there_is_room(client) -> None:
    """The one subprocess box is held by an episode of another spec; an episode of a
    spec listing `[subprocess, docker]` runs on Docker at once, its result says so, and
    its box time is priced as Docker's."""
    require(backend)
    release = asyncio.Event()

    async def gate(request: dict[str, Any]) -> None:
        await release.wait()

    async with (
        capped_worker(client, {"subprocess": BoxCap(running=1)}) as worker,
        ScriptedUpstream(policy=echo_policy, gate=gate) as up,
    ):
        ec = EpisodesClient(client, task_queue=worker.options.task_queue)
        holder = _held(up.base_url, 1)

        async def hold() -> list[EpisodeResult]:
            return [r async for r in ec.run_batch(holder)]

        holding = asyncio.ensure_future(hold())
        try:
            assert await wait_until(lambda: len(up.chat_requests) == 1, timeout=120)
            spilling = spec(
                name=f"spill-{uuid.uuid4().hex[:6]}",
                tasks=[{"id": "t0", "data": {"messages": ["a", "b"]}}],
                harness={
                    "runtime": ["subprocess", {"type": "docker", "image": backend.IMAGE}],
                    "ready_timeout_s": 60,
                },
                prices={"box_second": {"docker": 1.0}},
                turn_timeout_s=60,
            )
            [spilt] = [r async for r in ec.run_batch(spilling)]
        finally:
            release.set()
        [held] = await asyncio.wait_for(holding, 180)
    assert spilt.termination == "env_done", spilt.error
    assert spilt.runtime == "docker"
    assert spilt.cost is not None and spilt.cost.box > 0
    assert (held.termination, held.runtime) == ("env_done", "subprocess")


async def _figure(client: Any, batch: str, want: LiveFigure) -> bool:
    return await live_figure(client, batch) == want
