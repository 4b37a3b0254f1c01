"""What an env's `step` and `score` return: a StepOutcome / ScoreResult, or a dict of
their fields; anything else ends `env_error` with one line naming the fix."""

from __future__ import annotations

from typing import Any

import pytest

from episodes.envs.base import EnvCalls, Environment, score_transcript, step_turn
from episodes.errors import EnvironmentFailed
from episodes.types.results import ScoreResult, StepOutcome, Task, Transcript, TurnRecord


class Returns(Environment):
    def __init__(self, value: Any) -> None:
        self.value = value

    def reset(self, task: Task) -> Any:
        return None

    def step(self, reply: Any) -> Any:
        return self.value

    def score(self, transcript: Transcript) -> Any:
        return self.value


async def _step(value: Any) -> StepOutcome | None:
    return await step_turn(Returns(value), TurnRecord(turn=0), "r", EnvCalls())


async def test_a_step_outcome_or_a_dict_of_its_fields_is_taken() -> None:
    assert await _step(StepOutcome(done=True, reward=1.0)) == StepOutcome(done=True, reward=1.0)
    assert await _step({"done": True, "reward": 0.5}) == StepOutcome(done=True, reward=0.5)


@pytest.mark.parametrize(
    ("value", "got"),
    [
        (
            {"observation": "x", "reward": 1.0, "terminated": True},
            "dict with keys ['observation', 'reward', 'terminated']",
        ),
        (("x", 1.0, True), "tuple"),
        ("next message", "str"),
    ],
)
async def test_anything_else_is_one_line_naming_the_fix(value: Any, got: str) -> None:
    with pytest.raises(EnvironmentFailed) as e:
        await _step(value)
    first = str(e.value).splitlines()[0]
    assert first == (
        f"environment step() raised TypeError: step() must return episodes.StepOutcome, "
        f"not {got}: return StepOutcome(message=..., done=..., reward=...)"
    )
    assert "validation error" not in str(e.value)


async def test_score_names_its_fix_too() -> None:
    env = Returns({"score": 1.0})
    with pytest.raises(EnvironmentFailed) as e:
        await score_transcript(env, Transcript(task=Task(id="t")))
    assert str(e.value).splitlines()[0] == (
        "environment score() raised TypeError: score() must return episodes.ScoreResult, "
        "not dict with keys ['score']: return ScoreResult(reward=..., details=...)"
    )
    assert await score_transcript(
        Returns({"reward": 0.25}), Transcript(task=Task(id="t"))
    ) == ScoreResult(reward=0.25)
