"""Restoring a session (`on_worker_lost: restart`) on real harness processes: a fresh
harness gets the recorded turns by replay (old harnesses) or one `resume` packet
(harnesses that declare `resume: true`), and the env steps on the recorded replies."""

from __future__ import annotations

import sys

import pytest

from episodes.session.live import LiveSession
from episodes.types.results import TurnRecord
from episodes.types.spec import parse_spec
from tests.conftest import ROOT

RESUMABLE = [sys.executable, str(ROOT / "tests" / "support" / "harnesses" / "resumable_harness.py")]
COUNTING = [sys.executable, str(ROOT / "tests" / "support" / "harnesses" / "counting_harness.py")]


def _spec(command: list[str]):
    return parse_spec(
        {
            "name": "restore",
            "env": "script",
            "tasks": [{"id": "t", "data": {"messages": ["a", "b", "c", "d"]}}],
            "harness": {"command": command, "ready_timeout_s": 10, "stop_timeout_s": 1},
        }
    )


async def _recorded(command: list[str], turns: int) -> list[TurnRecord]:
    spec = _spec(command)
    session = LiveSession(spec, spec.tasks[0], 0, "s-original")
    try:
        await session.open()
        return [(await session.turn(i)).record for i in range(turns)]
    finally:
        await session.close()


@pytest.mark.parametrize("resume", [True, False], ids=["resume-packet", "replay"])
async def test_restored_session_continues_where_the_record_ends(resume: bool) -> None:
    command = [*RESUMABLE, "resume"] if resume else RESUMABLE
    records = await _recorded(command, 2)
    spec = _spec(command)
    session = LiveSession(spec, spec.tasks[0], 0, "s-restored")
    try:
        await session.open()
        assert getattr(session.harness, "resumable", False) is resume
        divergent, resumed = await session.restore(records)
        assert resumed is resume
        assert divergent == []
        nxt = await session.turn(2)
        # The env stepped on the recorded replies: its next message is the third one;
        # the harness knows the two turns before it, either way.
        assert nxt.record.message == "c"
        assert nxt.record.reply == {"message": "c", "seen": 3}
        assert [t.turn for t in session.transcript().turns] == [0, 1, 2]
    finally:
        await session.close()


async def test_replay_counts_replies_that_differ_from_the_record() -> None:
    records = await _recorded(COUNTING, 2)  # replies carry the harness's process id
    spec = _spec(COUNTING)
    session = LiveSession(spec, spec.tasks[0], 0, "s-diverged")
    try:
        await session.open()
        divergent, resumed = await session.restore(records)
        assert (divergent, resumed) == ([0, 1], False)
        # The transcript keeps the recorded turns, not the replayed ones.
        assert session.transcript().turns == records
        assert (await session.turn(2)).record.reply["received"] == 3
    finally:
        await session.close()


async def test_a_handled_harness_error_is_stepped_again_on_restore() -> None:
    # A recorded turn whose harness sent `error` and whose env went on (`step_error`):
    # the restored env is told of the same error, so its next message is the recorded
    # run's, and the new harness erring again on the replay is no failure.
    from tests.conftest import scripted_command
    from tests.support.envs import FORGIVING

    spec = parse_spec(
        {
            "name": "restore-error",
            "env": FORGIVING,
            "tasks": [{"id": "t"}],
            "harness": {"command": scripted_command("error-reply", "turn=1"), "stop_timeout_s": 1},
        }
    )
    original = LiveSession(spec, spec.tasks[0], 0, "s-err-original")
    try:
        await original.open()
        records = [(await original.turn(i)).record for i in range(2)]
    finally:
        await original.close()
    assert records[1].error_type == "harness_error"
    session = LiveSession(spec, spec.tasks[0], 0, "s-err-restored")
    try:
        await session.open()
        divergent, _ = await session.restore(records)
        assert divergent == []
        nxt = await session.turn(2)
        assert nxt.record.message == nxt.record.reply == "after the error in turn 1"
        assert session.transcript().turns[:2] == records
    finally:
        await session.close()
