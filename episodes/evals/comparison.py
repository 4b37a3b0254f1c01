"""Two eval batches paired by task: is B's mean reward different from A's beyond the noise?

`compare(a, b)` takes each batch's `Outcome`s (`episodes.evals.summary`), keeps the
tasks both counted (`by_task`), and for each the difference of its mean reward, B minus
A. On these differences:

- `difference`: their mean (B minus A, in mean reward over the paired tasks);
- `interval`: the bootstrap interval of that mean over tasks (seeded, reproducible);
- `p_value`: the paired sign-flip permutation test (`episodes.evals.stats.sign_flip_test`);
- `significant`: p_value < alpha (0.05 unless told).

Assumptions (docs/comparing.md says them for users): the tasks are independent of one
another, and under "no difference" each task's difference is as likely positive as
negative. Pairing by task removes the tasks' own difficulty from the noise, which is
why a paired test sees a smaller difference than two separate intervals would.
`flipped` lists the tasks whose verdict (passes: at least half its samples pass)
differs between the two. Pure: no Temporal.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from episodes.errors import EpisodesError
from episodes.evals.stats import (
    LEVEL,
    SEED,
    Interval,
    bootstrap_mean,
    flips,
    sign_flip_test,
    standard_error,
)
from episodes.evals.summary import BatchSummary, Outcome, by_task, summarize

ALPHA = 0.05


@dataclass(frozen=True)
class Flip:
    task: str
    a: bool
    """Whether the task passed in A."""
    b: bool


@dataclass(frozen=True)
class Comparison:
    a: BatchSummary
    b: BatchSummary
    paired: int
    """Tasks both batches counted: the differences are over these."""
    only_a: list[str]
    only_b: list[str]
    difference: float
    interval: Interval | None
    standard_error: float | None
    p_value: float
    alpha: float
    flipped: list[Flip] = field(default_factory=list)

    @property
    def significant(self) -> bool:
        return self.p_value < self.alpha

    @property
    def flip_rate(self) -> float:
        return len(self.flipped) / self.paired if self.paired else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "difference": self.difference,
            "interval": self.interval.as_list() if self.interval else None,
            "level": self.interval.level if self.interval else LEVEL,
            "standard_error": self.standard_error,
            "p_value": self.p_value,
            "alpha": self.alpha,
            "significant": self.significant,
            "test": "paired sign-flip permutation test over tasks",
            "paired_tasks": self.paired,
            "only_a": self.only_a,
            "only_b": self.only_b,
            "flip_rate": self.flip_rate,
            "flipped": [{"task": f.task, "a": f.a, "b": f.b} for f in self.flipped],
            "a": self.a.as_dict(),
            "b": self.b.as_dict(),
        }


def compare(
    a: Iterable[Outcome],
    b: Iterable[Outcome],
    threshold: float = 1.0,
    *,
    alpha: float = ALPHA,
    level: float = LEVEL,
    seed: int = SEED,
) -> Comparison:
    """B against A over the tasks both counted (see the module doc). Fails when no
    task is in both."""
    a, b = list(a), list(b)
    ta, tb = by_task(a, threshold), by_task(b, threshold)
    both = sorted(set(ta) & set(tb))
    if not both:
        raise EpisodesError("the two batches share no task with a counted episode: nothing to pair")
    diffs = [tb[t].mean - ta[t].mean for t in both]
    gained, lost = flips({t: ta[t].verdict for t in both}, {t: tb[t].verdict for t in both})
    flipped = sorted(
        [Flip(t, False, True) for t in gained] + [Flip(t, True, False) for t in lost],
        key=lambda f: f.task,
    )
    return Comparison(
        a=summarize(a, threshold, level=level, seed=seed),
        b=summarize(b, threshold, level=level, seed=seed),
        paired=len(both),
        only_a=sorted(set(ta) - set(tb)),
        only_b=sorted(set(tb) - set(ta)),
        difference=statistics.fmean(diffs),
        interval=bootstrap_mean(diffs, level=level, seed=seed),
        standard_error=standard_error(diffs),
        p_value=sign_flip_test(diffs, seed=seed),
        alpha=alpha,
        flipped=flipped,
    )
