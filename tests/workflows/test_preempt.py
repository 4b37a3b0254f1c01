"""Parking across workers and whole batches (issues 30 and 31): preemption.

Real parts: a dev server (the session's), in-process workers of the test's own on a
fresh queue, real harness processes, the `episodes` CLI as a subprocess, and for the
LLM harness the scripted upstream counting its requests. Nothing waits on a clock
except to show that a parked episode stays parked.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from typing import Any

import psutil
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from episodes import contract
from episodes.client import EpisodesClient
from episodes.client.batch.live import live_figure
from episodes.client.batch.server import batch_input, episodes_query, start_batch, wait_batch
from episodes.model.scripted.server import ScriptedUpstream
from episodes.types.io import EpisodeProgress
from episodes.types.results import EpisodeResult
from episodes.types.spec import parse_spec
from tests.episodes.cli.test_cli import episodes as cli
from tests.support.envs import ENDLESS
from tests.support.helpers import spec, wait_until
from tests.support.notebook import SHORT_NOTEBOOK, sampling_policy

pytestmark = pytest.mark.timeout(300)

ECHO = "episodes.harness.reference.echo"
LLM = "episodes.harness.reference.llm"


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def _harnesses(marker: str) -> list[int]:
    """The harness processes running under this test process (its workers' children)."""
    found = []
    for p in psutil.Process(os.getpid()).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if marker in " ".join(p.cmdline()):
                found.append(p.pid)
    return found


class _Worker:
    """An in-process worker of our own, started and stopped when the test says."""

    def __init__(self, client: Client, queue: str, worker_id: str, max_sessions: int) -> None:
        from workers.worker import EpisodeWorker, WorkerOptions

        self.worker_id = worker_id
        self._w = EpisodeWorker(
            client,
            WorkerOptions(
                task_queue=queue,
                worker_id=worker_id,
                max_sessions=max_sessions,
                reap_interval_s=2,
                provision_breaker_after=0,
            ),
        )
        self._task: asyncio.Task[Any] = asyncio.create_task(self._w.run())

    async def stop(self) -> None:
        if self._task.done():
            return
        self._w.request_stop()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(self._task, 60)


async def _progress(client: Client, wid: str) -> EpisodeProgress | None:
    with contextlib.suppress(Exception):
        return await client.get_workflow_handle(wid).query(
            contract.PROGRESS, result_type=EpisodeProgress
        )
    return None


async def _status_is(client: Client, wid: str, status: str) -> bool:
    p = await _progress(client, wid)
    return p is not None and p.status == status


async def _listed_running(client: Client, batch: str, n: int) -> bool:
    """The server's visibility lists n running episodes of the batch: what `park --batch`
    and `resume --batch` ask (it lags the workflows themselves a moment, more under load)."""
    query = f"{episodes_query(batch)} AND ExecutionStatus = 'Running'"
    return (await client.count_workflows(query)).count == n


async def _turned(client: Client, wid: str, n: int) -> bool:
    p = await _progress(client, wid)
    return p is not None and p.turns_done >= n


async def _activity_workers(client: Client, wid: str) -> list[tuple[str, str]]:
    """(activity type, worker id) of every activity the episode's run started, in order."""
    scheduled: dict[int, str] = {}
    started: list[tuple[str, str]] = []
    async for ev in client.get_workflow_handle(wid).fetch_history_events():
        if ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled[ev.event_id] = ev.activity_task_scheduled_event_attributes.activity_type.name
        elif ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attrs = ev.activity_task_started_event_attributes
            started.append((scheduled[attrs.scheduled_event_id], attrs.identity.split("@")[0]))
    return started


async def test_a_parked_episode_resumes_on_another_worker_and_ends_env_done(client) -> None:
    """No process while parked; its first worker stopped; a second one resumes it, replays
    the recorded turns exactly (no model call for them) and runs it to `env_done`."""
    queue = _name("park-move")
    first = _Worker(client, queue, _name("first"), max_sessions=2)
    second: _Worker | None = None
    try:
        async with ScriptedUpstream(policy=sampling_policy) as upstream:
            s = parse_spec(
                {
                    "name": _name("move"),
                    "env": SHORT_NOTEBOOK,
                    "env_args": {"delay_s": 0.3, "turns": 8},
                    "tasks": [{"id": "t"}],
                    "max_turns": 20,
                    "harness": {"command": f"{{python}} -m {LLM}"},
                    "model": {"base_url": upstream.base_url, "model": "scripted"},
                }
            )
            ec = EpisodesClient(client, task_queue=queue)
            handle = await ec.start_episode(s, s.tasks[0])
            assert await wait_until(lambda: _turned(client, handle.id, 2), timeout=60)
            assert _harnesses(LLM)
            await ec.park(handle.id)
            assert await wait_until(lambda: _status_is(client, handle.id, "parked"), timeout=60)
            # Parked: no harness process, no session, the upstream hears nothing.
            assert await wait_until(lambda: not _harnesses(LLM), timeout=30)
            p = await _progress(client, handle.id)
            assert p is not None and p.session is None
            at_park, sent = p.turns_done, len(upstream.chat_requests)

            await first.stop()
            second = _Worker(client, queue, _name("second"), max_sessions=2)
            # A worker on the queue does not wake a parked episode.
            assert await wait_until(lambda: _status_is(client, handle.id, "parked"), timeout=30)
            assert not _harnesses(LLM)
            await ec.resume(handle.id)
            result: EpisodeResult = await asyncio.wait_for(handle.result(), 120)
            after = len(upstream.chat_requests) - sent
        assert (result.termination, result.turns, result.restarts) == ("env_done", 8, 0), (
            result.error
        )
        assert result.turns_replayed == at_park and result.replay_divergences == 0
        assert len(upstream.chat_requests) - sent == after == 2 * (8 - at_park)
        # Who ran what: the first worker up to the park, the second from the resume on.
        ran = await _activity_workers(client, handle.id)
        kinds = [k for k, _ in ran]
        resumed = kinds.index(contract.RESTORE)
        assert {w for _, w in ran[:resumed]} == {first.worker_id}, ran
        assert {w for _, w in ran[resumed:]} == {second.worker_id}, ran
    finally:
        await first.stop()
        if second is not None:
            await second.stop()


async def test_a_resume_before_the_park_is_taken_calls_it_off(client, worker) -> None:
    """`resume` reaching an episode that is not parked is spent: a park asked later
    parks it and it stays parked (before: the stale resume woke it at once, so a batch
    resumed once could not be preempted again)."""
    ec = EpisodesClient(client, task_queue="episodes-test")
    s = spec(
        name=_name("early-resume"),
        env=ENDLESS,
        env_args={"delay_s": 0.2},
        max_turns=200,
        turn_timeout_s=30.0,
    )
    handle = await ec.start_episode(s, s.tasks[0])
    try:
        assert await wait_until(lambda: _turned(client, handle.id, 1), timeout=60)
        await ec.resume(handle.id)  # not parked: nothing to resume
        await ec.park(handle.id)
        assert await wait_until(lambda: _status_is(client, handle.id, "parked"), timeout=60)
        await asyncio.sleep(1.0)  # a parked episode stays parked (no condition to wait on)
        assert await _status_is(client, handle.id, "parked")
        # Park then resume before the park is taken: it never parks, it runs on.
        await ec.resume(handle.id)
        assert await wait_until(lambda: _status_is(client, handle.id, "running"), timeout=60)
        await ec.park(handle.id)
        await ec.resume(handle.id)
        p = await _progress(client, handle.id)
        assert p is not None
        assert await wait_until(lambda: _turned(client, handle.id, p.turns_done + 3), timeout=60)
        assert await _status_is(client, handle.id, "running")
    finally:
        await handle.cancel()
        with contextlib.suppress(Exception):
            await handle.result()


async def test_park_batch_frees_the_fleet_for_an_eval_then_resume_batch(client, dev_server) -> None:
    """The recipe of docs/operations/priority.md on a worker of 2 sessions: a training
    batch holds both; `episodes park --batch` frees them, a priority-1 eval runs to its
    end while the training stays parked, `episodes resume --batch` brings it back and
    it ends with every turn (the recorded ones replayed, none lost)."""
    queue = _name("preempt")
    w = _Worker(client, queue, _name("fleet"), max_sessions=2)
    flags = ["--address", dev_server.address, "--task-queue", queue]
    try:
        train = spec(
            name=_name("train"),
            env=ENDLESS,
            env_args={"delay_s": 0.3},
            tasks=[{"id": f"t{i}"} for i in range(2)],
            max_turns=40,
            turn_timeout_s=30.0,
            priority=5,
            concurrency=2,
        )
        train_h = await start_batch(client, batch_input(train), task_queue=queue)
        ids = [contract.episode_id(train.name, f"t{i}", 0) for i in range(2)]
        for wid in ids:
            assert await wait_until(lambda wid=wid: _turned(client, wid, 2), timeout=60)
        assert await wait_until(lambda: _listed_running(client, train.name, 2), timeout=60)

        code, out, err = await cli("park", "--batch", train.name, *flags)
        assert code == 0, out + err
        assert "park asked of 2 running episodes" in " ".join(out.split())
        for wid in ids:
            assert await wait_until(lambda wid=wid: _status_is(client, wid, "parked"), timeout=60)
        assert await wait_until(lambda: not _harnesses(ECHO), timeout=30)
        # Parked episodes are running workflows: asking again asks none of them, says
        # they are parked, and a park signal that reaches one anyway is spent (it used
        # to stay pending, and the batch parked again right after its resume).
        code, out, err = await cli("park", "--batch", train.name, *flags)
        assert code == 0, out + err
        said = " ".join(out.split())
        assert "park asked of 0 running episodes" in said and "0 asked already, 2 parked" in said
        await client.get_workflow_handle(ids[0]).signal(contract.PARK)
        # The progress line and the viewer count them apart from live ones.
        figure = await live_figure(client, train.name)
        assert (figure.running, figure.parked, figure.live) == (2, 2, 0), figure
        assert figure.line(2) == "live 0/2 · 2 parked"
        # `show` says where a parked episode is (it used to say only "still running").
        code, out, err = await cli("show", ids[1], *flags)
        assert code == 0, out + err
        progress = await _progress(client, ids[1])
        assert progress is not None
        turn = progress.turns_done
        assert f"parked at turn {turn}: `episodes resume {ids[1]}` goes on" in " ".join(
            out.split()
        ), out

        evals = spec(
            name=_name("eval"),
            tasks=[{"id": f"e{i}", "data": {"messages": ["a", "b"]}} for i in range(3)],
            priority=1,
        )
        evals_h = await start_batch(client, batch_input(evals), task_queue=queue)
        done = await asyncio.wait_for(wait_batch(client, evals_h), 120)
        assert done.metrics.terminations == {"env_done": 3}
        # The eval did not wait for the training: it is still parked, its turns kept.
        parked = [await _progress(client, wid) for wid in ids]
        assert all(p is not None and p.status == "parked" for p in parked), parked

        code, out, err = await cli("resume", "--batch", train.name, *flags)
        assert code == 0, out + err
        assert "resume asked of 2 running episodes" in " ".join(out.split())
        result = await asyncio.wait_for(wait_batch(client, train_h), 180)
        assert result.metrics.terminations == {"max_turns": 2}
        for wid, p in zip(ids, parked, strict=True):
            r = await client.get_workflow_handle(wid, result_type=EpisodeResult).result()
            assert (r.turns, r.restarts) == (40, 0)
            assert p is not None and r.turns_replayed == p.turns_done >= 2
        # Nothing running is left to ask.
        assert await wait_until(lambda: _listed_running(client, train.name, 0), timeout=60)
        code, out, _ = await cli("park", "--batch", train.name, *flags)
        assert code == 0 and "park asked of 0 running episodes" in " ".join(out.split())
        code, out, err = await cli("park", *flags)
        assert code == 2 and "give an episode's workflow id or --batch" in out + err
    finally:
        await w.stop()
