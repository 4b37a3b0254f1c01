"""Interactive sessions: the trainer sends each turn as a Temporal Update.

Real dev server, real worker, real harness processes (the counting harness reports
how many turn packets it received, and its pid).
"""

from __future__ import annotations

import asyncio
import sys
import uuid

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.worker import Replayer

from episodes.client import EpisodesClient
from episodes.errors import StepRejected
from episodes.payloads.settings import configured_data_converter
from episodes.types.io import StepInput, StepReply
from tests.conftest import ROOT, scripted_command
from tests.support.helpers import pid_alive, spec, wait_until
from workflows import WORKFLOWS

QUEUE = "episodes-test"
COUNTING = [sys.executable, str(ROOT / "tests" / "support" / "harnesses" / "counting_harness.py")]
SCRIPT = {"id": "t0", "data": {"messages": ["a", "b", "c"], "expected": ["a", "x", "c"]}}


def _client(client: Client) -> EpisodesClient:
    return EpisodesClient(client, task_queue=QUEUE)


def _spec(prefix: str, **over):
    # A trusted process group, not a sandbox: these tests watch the harness's host pid
    # (which a sandboxed harness cannot report) to see that it ends.
    over.setdefault("harness", {"runtime": {"type": "subprocess", "isolation": "none"}})
    return spec(name=f"{prefix}-{uuid.uuid4().hex[:6]}", **over)


async def _activities(handle, name: str) -> list[int]:
    """Scheduled-event ids of every activity `name` in the history (retries excluded)."""
    ids = []
    async for ev in handle.fetch_history_events():
        if ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            if ev.activity_task_scheduled_event_attributes.activity_type.name == name:
                ids.append(ev.event_id)
    return ids


async def test_trainer_messages_drive_the_harness_and_env(client, worker) -> None:
    s = _spec("inter", tasks=[SCRIPT])
    session = await _client(client).open_session(s, s.tasks[0])
    assert session.first_observation == "a" and not session.done

    # The trainer's messages reach the harness (echo), not the env's scripted ones.
    first = await session.step("a")
    assert (first.turn, first.reply, first.observation, first.done) == (0, "a", "b", False)
    second = await session.step("x")
    assert (second.reply, second.observation, second.done) == ("x", "c", False)
    last = await session.step("c")
    assert last.done and last.termination == "env_done" and last.reward == 1.0

    result = await session.close()
    assert result.termination == "env_done" and result.turns == 3
    assert result.reward == 1.0  # env.score on the recorded transcript: a, x, c all match
    assert await session.close() == result  # idempotent
    progress = await session.progress()
    assert [t.message for t in progress.turns] == ["a", "x", "c"]
    assert await wait_until(lambda: len(worker.registry) == 0, timeout=20)


async def test_retried_step_returns_the_same_reply_and_is_sent_once(client, worker) -> None:
    s = _spec("retry", command=COUNTING, tasks=[{"id": "t0", "data": {"messages": list("abcde")}}])
    session = await _client(client).open_session(s, s.tasks[0])
    handle = session.handle
    reply = await session.step("m0")
    assert reply.reply["received"] == 1

    # A trainer retrying after a lost response: the same update id, even another body.
    key = f"{session.workflow_id}:step:0"
    for message in ("m0", "something else"):
        again = await handle.execute_update(
            "step", StepInput(turn=0, message=message), id=key, result_type=StepReply
        )
        assert again == reply

    # The harness saw step 0 once: the next step is its second turn packet.
    nxt = await session.step("m1")
    assert nxt.reply == {
        "message": "m1",
        "received": 2,
        "pid": reply.reply["pid"],
        "proc": reply.reply["proc"],
    }
    # A caller-supplied key works the same way.
    k = f"trainer-key-{uuid.uuid4().hex[:6]}"
    third = await session.step("m2", idempotency_key=k)
    session.turn -= 1  # pretend the reply was lost: the client retries with its key
    assert await session.step("m2", idempotency_key=k) == third
    assert third.reply["received"] == 3

    result = await session.close()
    assert result.termination == "closed" and result.turns == 3
    assert len(await _activities(handle, "turn")) == 3  # one turn activity per step
    assert await wait_until(lambda: not pid_alive(reply.reply["pid"]), timeout=20)


async def test_validator_rejects_out_of_order_and_after_done(client, worker) -> None:
    s = _spec("valid", tasks=[{"id": "t0", "data": {"messages": ["a", "b"]}}])
    session = await _client(client).open_session(s, s.tasks[0])
    handle = session.handle
    with pytest.raises(StepRejected, match="out of order: the next step is 0"):
        await handle_step(session, turn=3)
    await session.step("a")
    with pytest.raises(StepRejected, match="out of order: the next step is 1"):
        await handle_step(session, turn=0, key="a-new-id-for-turn-0")
    done = await session.step("b")
    assert done.done and done.termination == "env_done"
    with pytest.raises(StepRejected, match=r"over|ended"):
        await handle_step(session, turn=2)
    result = await session.close()
    assert result.turns == 2 and result.termination == "env_done"
    # Rejected updates never reached the history: only the two steps that ran.
    steps = []
    async for ev in handle.fetch_history_events():
        if ev.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            request = ev.workflow_execution_update_accepted_event_attributes.accepted_request
            if request.input.name == "step":
                steps.append(request.meta.update_id)
    assert steps == [f"{session.workflow_id}:step:0", f"{session.workflow_id}:step:1"]


async def handle_step(session, *, turn: int, key: str | None = None) -> None:
    """A step with an explicit index, through the client's error mapping."""
    saved = session.turn
    session.turn = turn
    try:
        await session.step("late", idempotency_key=key)
    finally:
        session.turn = saved


async def test_idle_session_times_out_and_releases(client, worker) -> None:
    s = _spec("idle", command=COUNTING)
    session = await _client(client).open_session(s, s.tasks[0], idle_timeout_s=1.0)
    reply = await session.step("hello")
    pid = reply.reply["pid"]
    result = await session.handle.result()  # ends by itself: nobody sends another step
    assert result.termination == "idle_timeout"
    assert "no step arrived for 1 s" in (result.error or "")
    assert result.turns == 1
    assert await wait_until(lambda: not pid_alive(pid), timeout=20)
    with pytest.raises(StepRejected, match="ended"):
        await session.step("too late")
    assert await session.close() == result


async def test_cancel_releases_the_session(client, worker) -> None:
    s = _spec("cancel", command=COUNTING)
    session = await _client(client).open_session(s, s.tasks[0])
    pid = (await session.step("x")).reply["pid"]
    await session.handle.cancel()
    result = await session.close()
    assert result.termination == "cancelled" and result.turns == 1
    assert await wait_until(lambda: not pid_alive(pid), timeout=20)


async def test_cancel_during_a_step_ends_it_and_releases(client, worker) -> None:
    # The harness never answers turn 1: the step is in flight when the cancel lands.
    s = _spec("cancelstep", command=scripted_command("hang", "turn=1"), turn_timeout_s=120.0)
    session = await _client(client).open_session(s, s.tasks[0])
    await session.step("a")
    step = asyncio.create_task(session.step("b"))
    assert await wait_until(lambda: _turn_running(session, 1), timeout=20)
    await session.handle.cancel()
    reply = await asyncio.wait_for(step, 60)
    assert reply.done and reply.termination == "cancelled"
    result = await session.close()
    assert result.termination == "cancelled" and result.turns == 1
    assert await wait_until(
        lambda: not any(e.workflow_id == session.workflow_id for e in worker.registry.entries()),
        timeout=20,
    )


async def _turn_running(session, n: int) -> bool:
    """Turn `n`'s activity has started on the worker (so the harness has the message)."""
    desc = await session.handle.describe()
    return (
        any(
            a.activity_type.name == "turn" and a.attempt >= 1 and a.last_started_time.seconds > 0
            for a in desc.raw_description.pending_activities
        )
        and (await session.progress()).turns_done == n
    )


async def test_session_histories_replay_deterministically(client, worker) -> None:
    s = _spec("replay", command=COUNTING, tasks=[{"id": "t0", "data": {"messages": list("abcd")}}])
    ec = _client(client)
    session = await ec.open_session(s, s.tasks[0])
    await session.step("m0")
    await session.handle.execute_update(
        "step",
        StepInput(turn=0, message="again"),
        id=f"{session.workflow_id}:step:0",
        result_type=StepReply,
    )
    with pytest.raises(StepRejected):
        await handle_step(session, turn=5)
    await session.step("m1")
    await session.close()
    idle = await ec.open_session(s, s.tasks[0], sample=1, idle_timeout_s=0.5)
    await idle.step("m0")
    await idle.handle.result()

    replayer = Replayer(
        workflows=WORKFLOWS, data_converter=configured_data_converter(), debug_mode=True
    )
    for handle in (session.handle, idle.handle):
        history = await handle.fetch_history()
        await replayer.replay_workflow(history)  # raises on any nondeterminism


async def test_max_turns_ends_the_session(client, worker) -> None:
    s = _spec("maxt", max_turns=2)
    session = await _client(client).open_session(s, s.tasks[0])
    assert not (await session.step("a")).done
    last = await session.step("b")
    assert last.done and last.termination == "max_turns"
    assert (await session.close()).termination == "max_turns"


async def test_harness_failures_are_outcomes(client, worker) -> None:
    ec = _client(client)
    crash = _spec("crash", command=scripted_command("crash-mid", "turn=1"))
    session = await ec.open_session(crash, crash.tasks[0])
    assert not (await session.step("a")).done
    failed = await session.step("b")
    assert failed.done and failed.termination == "harness_crashed" and failed.error
    assert (await session.close()).termination == "harness_crashed"

    never = _spec("nostart", command=scripted_command("exit-now"))
    session = await ec.open_session(never, never.tasks[0])
    assert session.done and session.termination == "harness_start_failed"
    assert session.first_observation is None
    result = await session.close()
    assert result.termination == "harness_start_failed" and result.turns == 0


async def test_reopening_a_running_session_reattaches(client, worker) -> None:
    s = _spec("reopen", command=COUNTING)
    ec = _client(client)
    first = await ec.open_session(s, s.tasks[0])
    await first.step("m0")
    again = await ec.open_session(s, s.tasks[0])
    assert again.workflow_id == first.workflow_id and again.turn == 1
    reply = await again.step("m1")
    assert reply.turn == 1 and reply.reply["received"] == 2
    async with again:
        pass  # the context manager closes
    assert again.result is not None and again.result.turns == 2
