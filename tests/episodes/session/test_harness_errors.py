"""A harness's `error` packet: that turn failed, the harness runs on, and the env
decides what comes next (`Environment.step_error`); an env that does not handle it
ends the episode `harness_error`."""

from __future__ import annotations

from typing import Any

from episodes.local import run_episode_local
from episodes.session.live import LiveSession
from episodes.types.results import Task
from episodes.types.spec import parse_spec
from tests.conftest import scripted_command
from tests.support.envs import FORGIVING


def _spec(env: str = FORGIVING, **env_args: Any):
    return parse_spec(
        {
            "name": "harness-errors",
            "env": env,
            "env_args": env_args,
            "max_turns": 6,
            "tasks": [{"id": "t", "data": {"messages": ["a", "b", "c"]}}],
            "harness": {
                "command": scripted_command("error-reply", "turn=1"),
                "stop_timeout_s": 1,
            },
        }
    )


async def test_an_env_that_handles_the_error_gets_the_next_turn_on_the_same_harness():
    spec = _spec()
    session = LiveSession(spec, Task(id="t"), 0, "s-forgiven")
    try:
        await session.open()
        assert session.harness is not None
        pid = session.harness.pid
        assert (await session.turn(0)).record.reply == "m0"
        failed = await session.turn(1)
        # Recorded as the harness's error, and not the end: the env asked for more.
        assert failed.record.error_type == "harness_error"
        assert "scripted failure at turn 1" in (failed.record.error or "")
        assert failed.termination is None and not failed.observation.done
        assert failed.observation.message == "after the error in turn 1"
        # The same process answers the next turn, with the env's message.
        nxt = await session.turn(2)
        assert nxt.record.message == nxt.record.reply == "after the error in turn 1"
        assert session.harness.alive and session.harness.pid == pid
        assert [t.error_type for t in session.transcript().turns] == [None, "harness_error", None]
        # Asked again (a retried activity): the same recorded result, nothing re-sent.
        assert await session.turn(1) == failed
    finally:
        await session.close()


async def test_an_env_that_declines_ends_the_episode_harness_error():
    # `step_error` returning None, and the default of an env without one (`script`).
    for spec in (_spec(give_up=True), _spec("script")):
        session = LiveSession(spec, spec.tasks[0], 0, f"s-declined-{spec.env}")
        try:
            await session.open()
            await session.turn(0)
            failed = await session.turn(1)
            assert failed.termination == "harness_error" and failed.observation.done
            assert failed.record.error_type == "harness_error"
        finally:
            await session.close()


async def test_a_local_run_goes_on_past_a_handled_error_and_scores_it():
    result = await run_episode_local(_spec(done_at=4), Task(id="t"))
    assert (result.termination, result.turns, result.error) == ("env_done", 4, None)
    assert result.score_details == {"stepped_errors": [1], "errors": [1]}
    declined = await run_episode_local(_spec(give_up=True), Task(id="t"))
    assert (declined.termination, declined.turns) == ("harness_error", 2)
    assert "scripted failure at turn 1" in (declined.error or "")
