"""A batch's place on shared workers, given where it starts (`run_batch`, `episodes run`,
`episodes schedule create`) rather than in its spec: priority, fairness, budgets.

    spec = with_priority(spec, priority=1, fairness_key="evals", budget=BatchBudget(max_model_tokens=10**6))

The values given replace the spec's (`priority`, `fairness_key`, `fairness_weight`;
each budget limit given replaces that one limit); None keeps the spec's.
"""

from __future__ import annotations

from pydantic import ValidationError

from episodes.errors import EpisodesError
from episodes.types.priority import BatchBudget, BatchPriority
from episodes.types.spec import EpisodeSpec


def with_priority(
    spec: EpisodeSpec,
    *,
    priority: int | None = None,
    fairness_key: str | None = None,
    fairness_weight: float | None = None,
    budget: BatchBudget | None = None,
) -> EpisodeSpec:
    """The spec with these priority settings (validated: priority 1 to 5, a key of at most
    64 bytes, a weight of 0.001 to 1000)."""
    try:
        given = BatchPriority(
            priority=priority, fairness_key=fairness_key, fairness_weight=fairness_weight
        )
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise EpisodesError(f"{where}: {first['msg']} (priority 1-5, weight 0.001-1000)") from None
    update: dict[str, object] = {k: v for k, v in given.model_dump().items() if v is not None}
    if budget is not None and budget.is_set():
        limits = (spec.budget or BatchBudget()).model_dump()
        limits.update({k: v for k, v in budget.model_dump().items() if v is not None})
        update["budget"] = BatchBudget(**limits)
    return spec.model_copy(update=update) if update else spec


# The name before "fleet" came to mean the model upstreams only (`episodes.client.fleet.on_fleet`).
on_fleet = with_priority
