"""The live figure of a batch: `concurrency` is a ceiling, and a batch whose episodes
wait on a saturated model fleet starts no boxes (workers/backpressure.py), whoever
drives it. Real parts: the session's dev server, a worker of the test's own, the
chatty harness and a scripted upstream that holds every call until the test lets go
(so "saturated" is the test's doing, not timing)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from episodes.client import EpisodesClient
from episodes.client.batch.live import LiveFigure, live_figure
from episodes.client.batch.server import batch_input, start_batch, wait_batch
from episodes.model.fleet import all_replicas, saturated
from episodes.model.scripted.server import ScriptedUpstream, echo_policy
from episodes.types.spec import EpisodeSpec
from episodes.viewer.pages import batch_view
from tests.conftest import ROOT
from tests.support.helpers import spec, wait_until

pytestmark = pytest.mark.timeout(300)

CHATTY = [sys.executable, str(ROOT / "tests" / "support" / "harnesses" / "chatty_harness.py")]


@contextlib.asynccontextmanager
async def capped_worker(client: Any, max_sessions: int) -> AsyncIterator[Any]:
    """A worker of the test's own on a fresh queue, at most `max_sessions` sessions."""
    from workers.worker import EpisodeWorker, WorkerOptions

    w = EpisodeWorker(
        client,
        WorkerOptions(
            task_queue=f"live-{uuid.uuid4().hex[:6]}",
            max_sessions=max_sessions,
            reap_interval_s=2,
            provision_breaker_after=0,
        ),
    )
    task = asyncio.create_task(w.run())
    try:
        yield w
    finally:
        w.request_stop()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 60)


def _one_call(base_url: str, n: int) -> EpisodeSpec:
    """n one-turn episodes of one model call each, over one upstream that takes one
    call at a time from this worker (`max_concurrency: 1`)."""
    tasks = [{"id": f"t{i}", "data": {"messages": ["same"]}} for i in range(n)]
    return spec(
        name=f"live-{uuid.uuid4().hex[:6]}",
        tasks=tasks,
        command=CHATTY,
        # Held calls wait, they do not time out: not the turn, nor the harness's client
        # (its 60 s default passes before the test lets go on a loaded machine; the
        # episode then ends and its call runs on in the proxy, a flake).
        harness={"env": {"CHATTY_CALLS": "1", "CHATTY_TIMEOUT_S": "240"}, "ready_timeout_s": 30},
        model={"upstreams": [{"base_url": base_url, "max_concurrency": 1}], "model": "scripted"},
        turn_timeout_s=240,
        concurrency=n,
    )


def test_the_line() -> None:
    assert LiveFigure(running=8, waiting=5).line(16) == "live 3/16 · 5 wait for a box"
    assert LiveFigure(running=2, waiting=0).line() == "live 2"


async def test_a_batch_on_a_saturated_fleet_starts_no_box_and_the_figure_says_so(client):
    """Two sessions of a client-driven batch: one call held at the upstream, the other
    waiting for a place under the limit, so the worker's fleet is saturated. A batch
    workflow started then gets no box although the worker has room (2 of 4 sessions):
    its provision waits, on the server or (taken by a slot reserved before the fleet
    filled) in the worker, and the figure counts it waiting, not live. Once the calls
    go through, everything ends."""
    release = asyncio.Event()

    async def gate(request: dict[str, Any]) -> None:
        await release.wait()

    # The fleet is the loop's, and the tests share one loop: sessions or calls an earlier
    # test left on it would count in this worker's saturated() too. Let them end first.
    ok = await wait_until(_idle_fleet, timeout=120)
    assert ok, f"sessions or calls an earlier test left on the fleet: {_busy()}"
    async with (
        capped_worker(client, max_sessions=4) as worker,
        ScriptedUpstream(policy=echo_policy, gate=gate) as up,
    ):
        queue = worker.options.task_queue
        ec = EpisodesClient(client, task_queue=queue)
        first = _one_call(up.base_url, 2)

        async def drive() -> list[Any]:
            return [r async for r in ec.run_batch(first)]

        driving = asyncio.ensure_future(drive())
        try:
            # One call at the upstream, the other waiting for its place: saturated.
            assert await wait_until(
                lambda: len(up.chat_requests) == 1 and _queued(up) == 1 and saturated(), timeout=90
            )
            assert await wait_until(
                lambda: _figure(client, first.name, LiveFigure(running=2, waiting=0)), timeout=30
            )
            second = _one_call(up.base_url, 1)
            handle = await start_batch(client, batch_input(second), task_queue=queue)
            waiting = LiveFigure(running=1, waiting=1)
            ok = await wait_until(lambda: _figure(client, second.name, waiting), timeout=30)
            assert ok, (await live_figure(client, second.name), saturated(), len(up.chat_requests))
            # Still no box a while later (a broken pause would have started it by now).
            await asyncio.sleep(2)
            assert await live_figure(client, second.name) == waiting and saturated()
            sessions = {e.workflow_id for e in worker.registry.entries()}
            assert sessions == {f"{first.name}.t{i}.s0" for i in (0, 1)}
            # The viewer's batch page says the same.
            fleet = (await batch_view(client, second.name))["fleet"]
            assert (fleet["live"], fleet["waiting"]) == (0, 1)
        finally:
            release.set()
        results = await asyncio.wait_for(driving, 120)
        result = await asyncio.wait_for(wait_batch(client, handle), 120)
    assert [r.termination for r in results] == ["env_done"] * 2, [r.error for r in results]
    assert result.metrics.terminations == {"env_done": 1}
    assert len(up.chat_requests) == 3


def _busy() -> list[tuple[str, int, int, int]]:
    """(upstream, sessions, calls in flight, calls waiting) of each busy replica."""
    reps = all_replicas()
    return [(r.name, r.sessions, r.in_flight, r.waiting + r.backing_off) for r in reps]


def _idle_fleet() -> bool:
    return not any(sum(busy[1:]) for busy in _busy())


def _queued(up: ScriptedUpstream) -> int:
    """The calls waiting for a place under `up`'s limit."""
    return sum(r.waiting for r in all_replicas() if r.base_url == up.base_url)


async def _figure(client: Any, batch: str, want: LiveFigure) -> bool:
    return await live_figure(client, batch) == want
