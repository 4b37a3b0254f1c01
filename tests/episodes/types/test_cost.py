"""Usage as the upstream reported it, and the cost a price table makes of it (by hand)."""

from __future__ import annotations

import pytest

from episodes.types.cost import (
    Cost,
    ModelPrice,
    ModelUsage,
    Prices,
    episode_cost,
    merge_usage,
    usage_by_model,
)


def _call(model: str, usage: object) -> dict:
    return {"kind": "model_call", "request": {"model": model}, "usage": usage}


def test_usage_is_summed_per_model_with_cached_and_reasoning_tokens() -> None:
    events = [
        _call(
            "m",
            {
                "prompt_tokens": 1000,
                "completion_tokens": 300,
                "prompt_tokens_details": {"cached_tokens": 600},
                "completion_tokens_details": {"reasoning_tokens": 200},
            },
        ),
        _call("m", {"prompt_tokens": 50, "completion_tokens": 5}),
        _call("other", None),  # the upstream reported nothing: a call, no tokens
        {"kind": "tool_call", "name": "x"},
        "a harness event",
    ]
    usage = usage_by_model(events)
    assert usage == {
        "m": ModelUsage(
            calls=2, input_tokens=1050, cached_tokens=600, output_tokens=305, reasoning_tokens=200
        ),
        "other": ModelUsage(calls=1),
    }
    twice = merge_usage(usage, usage)
    assert twice["m"].input_tokens == 2100 and twice["other"].calls == 2


def test_cost_prices_cached_input_apart_and_box_seconds_by_runtime() -> None:
    prices = Prices(
        models={"m": ModelPrice(input=2.0, cached=0.5, output=8.0)},
        box_second={"docker": 0.0001},
    )
    usage = {
        "m": ModelUsage(
            calls=2, input_tokens=1_000_000, cached_tokens=400_000, output_tokens=250_000
        ),
        "unknown": ModelUsage(calls=1, input_tokens=10),
    }
    # 600,000 uncached x $2/M = 1.2; 400,000 cached x $0.5/M = 0.2; 250,000 x $8/M = 2.0.
    cost = episode_cost(usage, 30.0, "docker", prices)
    assert cost.model == pytest.approx(3.4)
    assert cost.box == pytest.approx(0.003)  # 30 s x $0.0001
    assert cost.total == pytest.approx(3.403)
    assert cost.unpriced == ["unknown"]
    # No cached price: cached tokens cost the input price; no runtime price: no box cost.
    plain = Prices(models={"m": ModelPrice(input=2.0, output=8.0)})
    assert episode_cost(usage, 30.0, "docker", plain).total == pytest.approx(2.0 + 2.0)
    assert Cost(model=1, box=2).plus(Cost(model=3, unpriced=["x"])) == Cost(
        model=4, box=2, unpriced=["x"]
    )


def test_a_budget_in_cost() -> None:
    from episodes.types.priority import BatchBudget, exhausted

    budget = BatchBudget(max_cost=1.5)
    assert budget.is_set()
    spent = {"model_tokens": 0, "model_calls": 0, "episode_seconds": 0.0}
    assert exhausted(budget, **spent, cost=1.49) is None
    assert exhausted(budget, **spent, cost=1.5) == "max_cost"


def test_amounts_in_dollars_read_as_people_write_them() -> None:
    from episodes.words import usd

    assert [usd(x) for x in (0, 7.14e-05, 0.0006006, 0.0123, 0.5, 1, 1234.567)] == [
        "$0",
        "$0.0000714",
        "$0.0006006",
        "$0.0123",
        "$0.5",
        "$1.00",
        "$1,234.57",
    ]
