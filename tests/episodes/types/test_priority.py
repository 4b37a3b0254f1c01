"""Fleet settings of a batch: validation, overrides, what an episode's turns spent."""

from __future__ import annotations

import pytest

from episodes.client.batch.priority import with_priority
from episodes.errors import EpisodesError
from episodes.search_attributes import task_priority
from episodes.types.priority import BatchBudget, exhausted, model_usage
from tests.support.helpers import spec


def test_spec_fields_are_validated() -> None:
    s = spec(priority=1, fairness_key="evals", fairness_weight=3, budget={"max_model_calls": 5})
    assert (s.priority, s.fairness_key, s.fairness_weight) == (1, "evals", 3.0)
    assert s.budget == BatchBudget(max_model_calls=5)
    for bad in ({"priority": 0}, {"priority": 6}, {"fairness_weight": 0}, {"fairness_key": ""}):
        with pytest.raises(Exception, match=r"priority|fairness"):
            spec(**bad)
    with pytest.raises(Exception, match="max_model_tokens"):
        spec(budget={"max_model_tokens": 0})
    with pytest.raises(Exception, match="budget"):
        spec(budget={"max_tokens": 5})  # unknown fields are errors


def test_overrides_replace_the_specs_and_keep_the_rest() -> None:
    s = spec(priority=5, fairness_key="training", budget={"max_model_calls": 5})
    assert with_priority(s) is s
    o = with_priority(s, priority=1, budget=BatchBudget(max_model_tokens=100))
    assert (o.priority, o.fairness_key) == (1, "training")
    assert o.budget == BatchBudget(max_model_calls=5, max_model_tokens=100)
    with pytest.raises(EpisodesError, match="priority"):
        with_priority(s, priority=7)
    with pytest.raises(EpisodesError, match="fairness_key"):
        with_priority(s, fairness_key="k" * 65)


def test_temporal_priority_of_a_spec() -> None:
    from temporalio.common import Priority

    assert task_priority(spec()) == Priority.default
    p = task_priority(spec(priority=2, fairness_key="a", fairness_weight=0.5))
    assert (p.priority_key, p.fairness_key, p.fairness_weight) == (2, "a", 0.5)


def test_model_usage_counts_calls_and_tokens_of_recorded_events() -> None:
    events = [
        {"kind": "model_call", "usage": {"total_tokens": 30}},
        {"kind": "model_call", "usage": {"prompt_tokens": 7, "completion_tokens": 3}},
        {"kind": "model_call", "usage": None},  # an upstream that reported none
        {"kind": "tool_call", "usage": {"total_tokens": 99}},
        "free text",
    ]
    assert model_usage(events) == (40, 3)


def test_the_first_budget_reached_is_named() -> None:
    b = BatchBudget(max_model_tokens=100, max_episode_seconds=10)
    assert exhausted(b, model_tokens=99, model_calls=9, episode_seconds=9.9) is None
    assert exhausted(b, model_tokens=100, model_calls=0, episode_seconds=0) == "max_model_tokens"
    assert exhausted(b, model_tokens=0, model_calls=10**6, episode_seconds=10) == (
        "max_episode_seconds"
    )
    assert exhausted(None, model_tokens=10**9, model_calls=10**9, episode_seconds=1e9) is None
