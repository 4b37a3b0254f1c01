"""The priority options of `episodes run` and `episodes schedule create`: a batch's priority,
fairness and budgets (they replace the spec's; docs/operations/priority.md)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from episodes.types.priority import BatchBudget

Priority = Annotated[
    int | None,
    typer.Option(min=1, max=5, help="The batch's priority on shared workers: 1 first .. 5 last."),
]
FairnessKey = Annotated[
    str | None,
    typer.Option(help="Within a priority, keys share the workers by weight (a tenant, `evals`)."),
]
FairnessWeight = Annotated[
    float | None, typer.Option(min=0.001, max=1000, help="This fairness key's share (1.0).")
]
MaxModelTokens = Annotated[
    int | None,
    typer.Option(min=1, help="Budget: start no episode once this many tokens are spent."),
]
MaxModelCalls = Annotated[
    int | None, typer.Option(min=1, help="Budget: start no episode after this many model calls.")
]
MaxEpisodeSeconds = Annotated[
    float | None,
    typer.Option(min=0.001, help="Budget: start no episode after this much episode (box) time."),
]
MaxCost = Annotated[
    float | None,
    typer.Option(
        min=0.000001,
        help="Budget: start no episode once this much is spent, in USD under the spec's prices.",
    ),
]

Oversample = Annotated[
    int | None,
    typer.Option(
        min=0,
        help="Run this many spare samples per task, stream each task's samples as a group "
        "once `samples` ended and cut the rest (stragglers; never exported).",
    ),
]


def priority_kwargs(
    priority: int | None,
    fairness_key: str | None,
    fairness_weight: float | None,
    max_model_tokens: int | None,
    max_model_calls: int | None,
    max_episode_seconds: float | None,
    max_cost: float | None = None,
) -> dict[str, Any]:
    """The keyword arguments of `episodes.client.batch.priority.with_priority` (and `run_batch`)."""
    budget = BatchBudget(
        max_model_tokens=max_model_tokens,
        max_model_calls=max_model_calls,
        max_episode_seconds=max_episode_seconds,
        max_cost=max_cost,
    )
    return {
        "priority": priority,
        "fairness_key": fairness_key,
        "fairness_weight": fairness_weight,
        "budget": budget if budget.is_set() else None,
    }
