"""An environment that raises is an outcome (`env_error`), never a hidden retry error."""

from __future__ import annotations

from pathlib import Path

import pytest

from episodes.errors import EnvironmentFailed
from episodes.local import run_episode_local
from episodes.session.live import LiveSession
from episodes.types.results import Task
from episodes.types.spec import parse_spec
from tests.support.envs import FAULTY

ECHO = "{python} -m episodes.harness.reference.echo"
ROOT = Path(__file__).resolve().parents[3]


def _spec(**env_args):
    return parse_spec(
        {
            "name": "faulty",
            "env": FAULTY,
            "env_args": env_args,
            "max_turns": 5,
            "tasks": [{"id": "t"}],
            "harness": {"command": ECHO},
        }
    )


async def test_step_raising_ends_env_error_with_message_and_traceback():
    spec = _spec(on="step", at=1)
    session = LiveSession(spec, Task(id="t"), 0, "s-env-step")
    try:
        await session.open()
        first = await session.turn(0)
        assert first.termination is None
        second = await session.turn(1)
        assert second.termination == "env_error"
        assert second.observation.done
        assert "step() raised ValueError: step-canary at 1" in second.record.error
        assert "environment traceback" in second.record.error
        assert second.record.reply is not None  # the harness's answer is kept
        # Asked again (a retried activity): the same recorded outcome, not TurnOutOfOrder.
        assert await session.turn(1) == second
    finally:
        await session.close()


async def test_reset_raising_is_environment_failed_and_nothing_left_running():
    spec = _spec(on="reset")
    session = LiveSession(spec, Task(id="t"), 0, "s-env-reset")
    with pytest.raises(EnvironmentFailed, match="reset\\(\\) raised KeyError"):
        await session.open()
    assert session.closed
    assert session.harness is not None and not session.harness.alive


async def test_event_callback_raising_is_raised_again_on_retry():
    spec = parse_spec(
        {
            "name": "ev",
            "env": "script",
            "tasks": [{"id": "t", "data": {"messages": ["a"]}}],
            "harness": {
                "command": "{python} -m tests.support.harnesses.scripted_harness events n=2",
                "cwd": str(ROOT),
                # The sandbox sees none of the project but what it is given.
                "runtime": {"type": "subprocess", "ro_paths": [str(ROOT / "tests")]},
            },
        }
    )

    def boom(event):
        raise RuntimeError("callback-canary")

    session = LiveSession(spec, spec.tasks[0], 0, "s-cb")
    try:
        await session.open()
        with pytest.raises(RuntimeError, match="callback-canary"):
            await session.turn(0, on_event=boom)
        # The retry sees the turn's own error, not "turn 0 asked for, next is 1".
        with pytest.raises(RuntimeError, match="callback-canary"):
            await session.turn(0)
    finally:
        await session.close()


async def test_local_episode_scores_env_error():
    result = await run_episode_local(_spec(on="step", at=2), Task(id="t"))
    assert result.termination == "env_error"
    assert result.turns == 3
    assert result.reward == 0.5
    assert "step-canary at 2" in (result.error or "")
