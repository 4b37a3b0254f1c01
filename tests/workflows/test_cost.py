"""An episode's result holds its model usage per model, summed over every run of its
chain (continue-as-new carries it), and its cost under the spec's price table
(stand-in activities on the time-skipping server)."""

from __future__ import annotations

import pytest

from episodes.types.cost import ModelUsage
from episodes.types.io import DriveInput, DriveResult
from episodes.types.results import ScoreResult, TurnResult
from tests.workflows.standins import StandIns, spec, turn_result
from tests.workflows.test_episode import start


def _with_call(n: int) -> TurnResult:
    """Turn n made one call: 1,000 input tokens (400 cached), 100 output (30 reasoning)."""
    res = turn_result(n)
    res.record.events = [
        {
            "kind": "model_call",
            "request": {"model": "m"},
            "response": {"model": "m-2025", "system_fingerprint": "fp"},
            "usage": {
                "prompt_tokens": 1000,
                "completion_tokens": 100,
                "total_tokens": 1100,
                "prompt_tokens_details": {"cached_tokens": 400},
                "completion_tokens_details": {"reasoning_tokens": 30},
            },
        }
    ]
    return res


class Calling(StandIns):
    """A drive that records a model call per turn and pauses where the workflow asks."""

    async def on_drive(self, inp: DriveInput) -> DriveResult:
        for n in range(inp.first_turn, inp.max_turns):
            if not await self.record(inp, [_with_call(n)]) and n + 1 < inp.max_turns:
                return DriveResult(next_turn=n + 1)
        return DriveResult(
            termination="max_turns", next_turn=inp.max_turns, score=ScoreResult(reward=1.0)
        )


async def test_usage_and_cost_over_a_continued_chain(env) -> None:
    prices = {"models": {"m": {"input": 2.0, "cached": 0.5, "output": 8.0}}}
    s = Calling(env.client)
    async with s.running():
        handle = await start(env, s, spec=spec(max_turns=5, prices=prices), turns_per_run=2)
        result = await handle.result()
    assert (result.termination, result.turns) == ("max_turns", 5)
    assert s.calls["drive"] == 3  # three runs: the usage crossed two continue-as-news
    assert (result.model_calls, result.model_tokens) == (5, 5500)
    assert result.usage == {
        "m": ModelUsage(
            calls=5, input_tokens=5000, cached_tokens=2000, output_tokens=500, reasoning_tokens=150
        )
    }
    # 3,000 uncached x $2/M + 2,000 cached x $0.5/M + 500 output x $8/M = 0.011;
    # no price per box-second for the runtime: no box cost.
    assert result.cost is not None
    assert result.cost.model == pytest.approx(0.011)
    assert result.cost.box == 0.0 and result.cost.unpriced == []


async def test_without_a_price_table_there_is_usage_and_no_cost(env) -> None:
    s = Calling(env.client)
    async with s.running():
        result = await (await start(env, s, spec=spec(max_turns=1))).result()
    assert result.usage["m"].calls == 1 and result.cost is None
