"""Durability defects of issue 11, each through a real dev server and real harnesses:
env errors as outcomes, the backstop timeout that is not a lost worker, a bounded
`progress` query, interactive sessions that continue-as-new, and `await_episode` that
leaves provision's slots alone."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import uuid

from episodes.client import EpisodesClient
from episodes.client.batch.server import batch_input, start_batch
from episodes.client.interactive import open_session
from episodes.types.io import EpisodeProgress
from tests.conftest import ROOT
from tests.support.envs import ENDLESS, FAULTY
from tests.support.helpers import host_pid, pid_alive, spec, wait_until
from workers.worker import EpisodeWorker, WorkerOptions

QUEUE = "episodes-test"
COUNTING = [sys.executable, str(ROOT / "tests" / "support" / "harnesses" / "counting_harness.py")]
HANG = [
    "{python}",
    "-c",
    "from episodes.harness import sdk; import time; sdk.serve(lambda t, m, e: time.sleep(600))",
]


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


async def test_env_reset_and_step_raising_end_env_error_scored(client, worker) -> None:
    episodes = EpisodesClient(client, task_queue=QUEUE)
    s = spec(name=_name("reset"), env=FAULTY, env_args={"on": "reset"})
    result = await asyncio.wait_for(episodes.run_episode(s, s.tasks[0]), 60)
    # Never reset, never scored (issue 19): no reward.
    assert (result.termination, result.turns, result.reward) == ("env_error", 0, None)
    assert "reset() raised KeyError" in (result.error or "")

    s = spec(name=_name("step"), env=FAULTY, env_args={"on": "step", "at": 1})
    result = await asyncio.wait_for(episodes.run_episode(s, s.tasks[0]), 60)
    assert (result.termination, result.turns, result.reward) == ("env_error", 2, 0.5)
    assert "step-canary at 1" in (result.error or "")

    s = spec(name=_name("ireset"), env=FAULTY, env_args={"on": "reset"})
    session = await open_session(client, QUEUE, s, s.tasks[0])
    assert session.done and session.termination == "env_error"
    assert (await session.close()).reward is None
    assert not [e for e in worker.registry.entries() if e.workflow_id.startswith(s.name)]


async def test_score_past_its_timeout_is_env_error_not_worker_lost(client, worker) -> None:
    s = spec(
        name=_name("hangscore"),
        env=FAULTY,
        env_args={"on": "score", "hang_s": 20},
        score_timeout_s=1,
    )
    session = await open_session(client, QUEUE, s, s.tasks[0])
    await session.step("m0")
    [entry] = [e for e in worker.registry.entries() if e.workflow_id == session.workflow_id]
    pid = host_pid(entry.session)
    result = await asyncio.wait_for(session.close(), 60)
    # Before: every timeout was a lost worker (`worker_lost`, then the workflow failed
    # scoring the transcript with the same hanging env).
    assert result.termination == "env_error"
    assert result.reward is None and "did not finish in 1 s" in result.score_details["error"]
    assert await wait_until(lambda: not pid_alive(pid), timeout=10)  # released


async def test_progress_query_is_bounded_and_takes_since_and_last(client, worker) -> None:
    s = spec(name=_name("prog"), env=ENDLESS, max_turns=150)
    handle = await EpisodesClient(client, task_queue=QUEUE).start_episode(s, s.tasks[0])
    assert (await asyncio.wait_for(handle.result(), 120)).turns == 150
    p = await handle.query("progress", result_type=EpisodeProgress)
    # Before: all 150 turns (a run holds up to 1,000 of up to 1 MiB: past gRPC's 4 MB).
    assert (len(p.turns), p.first_turn, p.turns_done) == (100, 50, 150)
    assert [t.turn for t in p.turns] == list(range(50, 150))
    p = await handle.query("progress", args=[140, None], result_type=EpisodeProgress)
    assert [t.turn for t in p.turns] == list(range(140, 150))
    p = await handle.query("progress", args=[None, 5], result_type=EpisodeProgress)
    assert (p.first_turn, len(p.turns)) == (145, 5)


async def test_interactive_session_continues_as_new_keeping_steps_exactly_once(
    client, worker
) -> None:
    s = spec(name=_name("ican"), env=ENDLESS, command=COUNTING, max_turns=40)
    session = await open_session(client, QUEUE, s, s.tasks[0], turns_per_run=2)
    for n in range(6):
        reply = await session.step(f"x{n}")
        assert reply.reply["received"] == n + 1  # the harness saw each message once
    assert await wait_until(lambda: _runs(session, 4), timeout=20)
    # A retry of the last step (same update id), now answered by the run after it.
    again = await session.handle.execute_update(
        "step", {"turn": 5, "message": "x5"}, id=f"{session.workflow_id}:step:5"
    )
    assert again["reply"]["received"] == 6
    assert (await session.step("x6")).reply["received"] == 7
    result = await session.close()
    assert (result.termination, result.turns, result.score_details) == ("closed", 7, {"turns": 7})


async def _runs(session, n: int) -> bool:
    with contextlib.suppress(Exception):
        return (await session.progress()).runs >= n
    return False


async def test_await_episode_does_not_take_provision_slots(client) -> None:
    queue = _name("side")
    w = EpisodeWorker(client, WorkerOptions(task_queue=queue, max_sessions=2))
    running = asyncio.create_task(w.run())
    episodes = EpisodesClient(client, task_queue=queue)
    batch = _name("reattach")
    hang = spec(name=batch, command=HANG, turn_timeout_s=300)
    first = await episodes.start_episode(hang, hang.tasks[0], batch_id=batch)
    try:
        assert await wait_until(lambda: len(w.registry) == 1, timeout=30)
        # The batch finds its episode running: it waits for it with `await_episode`.
        bh = await start_batch(client, batch_input(hang, batch_id=batch), task_queue=queue)
        assert await wait_until(lambda: _awaiting(bh), timeout=30)
        # One session and one waiting batch on a 2-session worker: a new episode still
        # provisions (before, the wait held the second slot until the episode ended).
        s = spec(name=_name("after"))
        result = await asyncio.wait_for(episodes.run_episode(s, s.tasks[0]), 30)
        assert result.termination == "env_done"
    finally:
        await first.cancel()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(bh.result(), 60)
        w.request_stop()
        await asyncio.wait_for(running, 30)


async def _awaiting(handle) -> bool:
    desc = await handle.describe()
    return any(
        a.activity_type.name == "await_episode" and a.state == 2  # STARTED
        for a in desc.raw_description.pending_activities
    )
