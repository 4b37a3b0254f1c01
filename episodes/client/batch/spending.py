"""What a client-side batch has spent, against its budget (`spec.budget`).

Counted from the episodes' results as they come in (model tokens and calls as the
session's proxy recorded them, episode time on a box), every attempt of each as it
ends: an episode run again after an infrastructure failure spent too, and so did one
whose workflow failed (the model use its history recorded). So a restarted trainer that
re-attaches to the episodes that finished counts them again and stops where it stopped
(`episodes.types.priority`). `run_batch(groups=True)` checks it before dispatching a
group: past the budget no new group starts, the groups already dispatched finish whole.
"""

from __future__ import annotations

from dataclasses import dataclass

from episodes.types.priority import BatchBudget, BudgetName, exhausted
from episodes.types.results import EpisodeResult


@dataclass
class Spending:
    budget: BatchBudget | None
    model_tokens: int = 0
    model_calls: int = 0
    episode_seconds: float = 0.0
    cost: float = 0.0
    """USD, the results' `cost` summed (under the spec's `prices`)."""
    reached: BudgetName | None = None
    """The first budget reached (this stream's own: the client's `budget_exhausted`
    only reports it, so two batches run at once on one client never stop each other)."""

    def add(self, result: EpisodeResult) -> BudgetName | None:
        """Count one ended episode (an attempt); the budget reached by now, if any."""
        self.model_tokens += result.model_tokens
        self.model_calls += result.model_calls
        self.episode_seconds += max(0.0, result.duration_s)
        self.cost += result.cost.total if result.cost else 0.0
        self.reached = self.reached or exhausted(
            self.budget,
            model_tokens=self.model_tokens,
            model_calls=self.model_calls,
            episode_seconds=self.episode_seconds,
            cost=self.cost,
        )
        return self.reached
