"""A batch's place on shared workers: its priority, its fairness share, its budgets.

Priority and fairness are Temporal's own (`temporalio.common.Priority`): set where a
batch's first workflow starts, the server hands them down to every child workflow and
activity its episodes run (provision, drive, restore, ...), so a backlogged queue
serves priority 1 before 5 and, within a priority, fairness keys in proportion to
their weights. Budgets are counted by the batch from its episodes' results (model
calls and tokens as recorded by the session's proxy, episode time on a box): past
one, it starts no more episodes and ends `budget_exhausted`.

Only pydantic and the standard library (the `episodes.types` floor).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from pydantic import Field

from episodes.types.base import Model

MIN_PRIORITY, MAX_PRIORITY = 1, 5
BudgetName = Literal["max_model_tokens", "max_model_calls", "max_episode_seconds", "max_cost"]


class BatchPriority(Model):
    """Where a batch's tasks stand in a backlogged queue (all None: the server's
    defaults, priority 3 and one shared fairness key)."""

    priority: int | None = Field(default=None, ge=MIN_PRIORITY, le=MAX_PRIORITY)
    """1 (first) to 5 (last); None: 3."""
    fairness_key: str | None = Field(default=None, min_length=1, max_length=64)
    """A tenant or a kind of work (`training`, `evals`, a team): within one priority,
    keys share the workers in proportion to their weights."""
    fairness_weight: float | None = Field(default=None, ge=0.001, le=1000)
    """This key's share relative to other keys' (None: 1.0)."""

    def is_set(self) -> bool:
        return any(v is not None for v in (self.priority, self.fairness_key, self.fairness_weight))


class BatchBudget(Model):
    """Limits on what one batch may spend; None: no limit. Counted durably from the
    episodes' results, so a re-run batch (or a restarted client) counts the episodes
    that already ran and does not start over. Every attempt counts as it ends: an
    episode run again after an infrastructure failure (`batch_retries`) spent too, and
    so did an episode whose workflow failed (what its history recorded). Past a budget
    no episode starts, a re-run included; the episodes in flight finish: the overshoot
    is at most `concurrency` episodes."""

    max_model_tokens: int | None = Field(default=None, ge=1)
    """Tokens (prompt + completion, as the upstream reported them) over all episodes,
    every attempt of each."""
    max_model_calls: int | None = Field(default=None, ge=1)
    """Calls through the sessions' model proxies over all episodes, every attempt of each."""
    max_episode_seconds: float | None = Field(default=None, gt=0)
    """Episode time (provision to release, the time its box was held) over all episodes,
    every attempt of each."""
    max_cost: float | None = Field(default=None, gt=0)
    """Cost in USD under the spec's `prices` (each result's `cost`) over all episodes;
    needs a price table."""

    def is_set(self) -> bool:
        return any(
            v is not None
            for v in (
                self.max_model_tokens,
                self.max_model_calls,
                self.max_episode_seconds,
                self.max_cost,
            )
        )


def exhausted(
    budget: BatchBudget | None,
    *,
    model_tokens: int,
    model_calls: int,
    episode_seconds: float,
    cost: float = 0.0,
) -> BudgetName | None:
    """The first budget reached (what was spent at or past its limit), else None."""
    if budget is None:
        return None
    if budget.max_model_tokens is not None and model_tokens >= budget.max_model_tokens:
        return "max_model_tokens"
    if budget.max_model_calls is not None and model_calls >= budget.max_model_calls:
        return "max_model_calls"
    if budget.max_episode_seconds is not None and episode_seconds >= budget.max_episode_seconds:
        return "max_episode_seconds"
    if budget.max_cost is not None and cost >= budget.max_cost:
        return "max_cost"
    return None


class RecordedUsage(Model):
    """What an episode's history recorded of its model use: an episode whose workflow
    failed has no result, and its turns are all that says what it spent."""

    model_tokens: int = 0
    model_calls: int = 0


def model_usage(events: list[object]) -> tuple[int, int]:
    """(tokens, calls) of the `model_call` events of a turn record (raw dicts as
    recorded; a call without `usage` counts as a call of 0 tokens)."""
    tokens = calls = 0
    for e in events:
        if not isinstance(e, dict) or e.get("kind") != "model_call":
            continue
        calls += 1
        usage = e.get("usage")
        if isinstance(usage, dict):
            total = usage.get("total_tokens")
            if not isinstance(total, int):
                parts = (usage.get("prompt_tokens"), usage.get("completion_tokens"))
                total = sum(p for p in parts if isinstance(p, int))
            tokens += max(0, total)
    return tokens, calls


def records_usage(records: Iterable[Any]) -> tuple[int, int]:
    """(tokens, calls) over turn records (anything with `events`), `model_usage` summed."""
    tokens = calls = 0
    for r in records:
        more_tokens, more_calls = model_usage(r.events)
        tokens, calls = tokens + more_tokens, calls + more_calls
    return tokens, calls
