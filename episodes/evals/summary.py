"""An eval batch's figures with their noise: what counts, per task, and the intervals.

`summarize` takes one `Outcome` per episode of a batch (the final attempt of each
(task, sample): `episodes.types.attempts`) and gives the mean reward with its standard
error and interval, the pass rate with its Wilson interval, and pass@k and pass^k with
bootstrap intervals over tasks (`episodes.evals.stats`). `episodes compare`, the
viewer's batch page and its comparison page read these. Pure: no Temporal.

What counts (the same rule everywhere):
- an episode that has not ended, ended for an infrastructure reason (`INFRA_TERMINATIONS`:
  the agent had no say in it) or was cancelled (a groups stream's straggler) is left out;
- every other episode scores its reward, and 0 when it has none (a harness that crashed
  before the env could score it failed the task);
- it passes when its reward is at least the pass threshold;
- a task's value is the mean over its counted samples, so a task run k times weighs as
  much as one run once: intervals and standard errors are over tasks, never treating a
  task's samples as independent draws.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from episodes.evals.stats import (
    LEVEL,
    SEED,
    Interval,
    TaskTally,
    bootstrap_mean,
    pass_at_k_interval,
    pass_hat_k_interval,
    standard_error,
    wilson,
)
from episodes.types.metrics import report_ks
from episodes.types.results import INFRA_TERMINATIONS


@dataclass(frozen=True)
class Outcome:
    """One episode as the statistics see it."""

    task: str
    reward: float | None
    termination: str | None
    """None: still running."""


def counts(o: Outcome) -> bool:
    """Whether the episode is in the figures (see the module doc)."""
    return o.termination is not None and o.termination not in (*INFRA_TERMINATIONS, "cancelled")


def score(o: Outcome) -> float:
    return o.reward if o.reward is not None else 0.0


def passes(o: Outcome, threshold: float) -> bool:
    return o.reward is not None and o.reward >= threshold


@dataclass(frozen=True)
class TaskScores:
    """A task's counted samples: their scores and how many passed."""

    scores: list[float]
    passed: int

    @property
    def mean(self) -> float:
        return statistics.fmean(self.scores)

    @property
    def tally(self) -> TaskTally:
        return TaskTally(len(self.scores), self.passed)

    @property
    def verdict(self) -> bool:
        """The task passes when at least half its samples pass (one sample: it passes)."""
        return 2 * self.passed >= len(self.scores)


def by_task(outcomes: Iterable[Outcome], threshold: float) -> dict[str, TaskScores]:
    """The counted episodes grouped by task (tasks with none counted are absent)."""
    scores: dict[str, list[float]] = defaultdict(list)
    passed: dict[str, int] = defaultdict(int)
    for o in outcomes:
        if counts(o):
            scores[o.task].append(score(o))
            passed[o.task] += passes(o, threshold)
    return {t: TaskScores(s, passed[t]) for t, s in sorted(scores.items())}


@dataclass(frozen=True)
class Estimate:
    """A figure and its interval (and standard error, where it has one)."""

    value: float
    interval: Interval | None
    standard_error: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "value": self.value,
            "interval": self.interval.as_list() if self.interval else None,
            "standard_error": self.standard_error,
        }


@dataclass(frozen=True)
class BatchSummary:
    threshold: float
    tasks: int
    episodes: int
    """Counted episodes (see the module doc)."""
    left_out: int
    """Episodes not counted: running, infrastructure failures, cancelled."""
    mean_reward: Estimate | None
    pass_rate: Estimate | None
    """Passed episodes over counted ones, with the Wilson interval."""
    pass_at_k: dict[int, Estimate] = field(default_factory=dict)
    pass_hat_k: dict[int, Estimate] = field(default_factory=dict)
    level: float = LEVEL

    def as_dict(self) -> dict[str, Any]:
        return {
            "threshold": self.threshold,
            "level": self.level,
            "tasks": self.tasks,
            "episodes": self.episodes,
            "left_out": self.left_out,
            "mean_reward": self.mean_reward.as_dict() if self.mean_reward else None,
            "pass_rate": self.pass_rate.as_dict() if self.pass_rate else None,
            "pass_at_k": {k: e.as_dict() for k, e in self.pass_at_k.items()},
            "pass_hat_k": {k: e.as_dict() for k, e in self.pass_hat_k.items()},
        }


def summarize(
    outcomes: Iterable[Outcome],
    threshold: float = 1.0,
    *,
    level: float = LEVEL,
    seed: int = SEED,
) -> BatchSummary:
    """A batch's figures with their intervals (see the module doc)."""
    outcomes = list(outcomes)
    tasks = by_task(outcomes, threshold)
    means = [t.mean for t in tasks.values()]
    counted = sum(len(t.scores) for t in tasks.values())
    passed = sum(t.passed for t in tasks.values())
    mean_reward = (
        Estimate(
            statistics.fmean(means),
            bootstrap_mean(means, level=level, seed=seed),
            standard_error(means),
        )
        if means
        else None
    )
    pass_rate = Estimate(passed / counted, wilson(passed, counted, level)) if counted else None
    tallies = [t.tally for t in tasks.values()]
    most = max((t.n for t in tallies), default=0)
    at_k: dict[int, Estimate] = {}
    hat_k: dict[int, Estimate] = {}
    for k in report_ks(range(1, most + 1)):
        value, interval = pass_at_k_interval(tallies, k, level=level, seed=seed)
        if value is not None:
            at_k[k] = Estimate(value, interval)
        value, interval = pass_hat_k_interval(tallies, k, level=level, seed=seed)
        if value is not None:
            hat_k[k] = Estimate(value, interval)
    return BatchSummary(
        threshold=threshold,
        tasks=len(tasks),
        episodes=counted,
        left_out=len(outcomes) - counted,
        mean_reward=mean_reward,
        pass_rate=pass_rate,
        pass_at_k=at_k,
        pass_hat_k=hat_k,
        level=level,
    )
