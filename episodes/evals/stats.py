"""The statistics of eval batches: intervals, standard errors and a paired test. Pure.

Everything here takes plain numbers (per-task tallies, per-task mean rewards, per-task
differences) and returns plain numbers, so the CLI (`episodes compare`, `episodes run`'s
summary), the viewer's pages and the tests compute them alike. Standard library only
(no numpy, no scipy: neither is a dependency of the package).

- `wilson`: the Wilson score interval of a rate (successes out of n independent trials).
- `standard_error`: the standard error of a mean, from the sample standard deviation.
- `bootstrap_mean`: a percentile bootstrap interval of a mean, resampling the values
  (in this package: tasks) with replacement, seeded, so the same values always give the
  same interval.
- `pass_at_k` (Chen et al. 2021, defined once in `episodes.types.metrics`) and
  `pass_hat_k`, pass^k: the chance that k samples drawn without replacement from a
  task's n all pass, C(c, k) / C(n, k) (Yao et al. 2024, tau-bench), also unbiased.
- `sign_flip_test`: the paired permutation test of a mean difference: under the null
  hypothesis each task's difference is as likely to have either sign (the two batches
  are exchangeable within a task), so the p-value is the share of the 2^n sign
  assignments whose mean is at least as far from 0 as the one observed; exact up to
  `EXACT_UP_TO` non-zero differences, else estimated from seeded random assignments.
- `flips`: the tasks whose pass/fail verdict differs between two runs.

Seeds: every random draw goes through `random.Random(seed)` (`choices` for the
bootstrap, `randbytes` for the sign flips), whose sequences Python keeps stable across
versions for a given integer seed: the same input gives the same interval and p-value.

Cost (pure Python): a bootstrap draws n x `RESAMPLES` values, about 0.3 s for 1,000
tasks on one loaded core; the sign-flip test signs eight differences per random byte
through precomputed sums, about 0.4 s for 1,000 tasks and `PERMUTATIONS` assignments.
"""

from __future__ import annotations

import functools
import itertools
import math
import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import getitem

from episodes.types.metrics import pass_at_k

__all__ = [
    "LEVEL",
    "Interval",
    "TaskTally",
    "bootstrap_mean",
    "flips",
    "pass_at_k",
    "pass_at_k_interval",
    "pass_hat_k",
    "pass_hat_k_interval",
    "sign_flip_test",
    "standard_error",
    "wilson",
]

LEVEL = 0.95
"""The confidence level of every interval here unless told otherwise."""
RESAMPLES = 2000
"""Bootstrap resamples: the interval's ends move by about 0.5% of its width from one
seed to another at this count."""
PERMUTATIONS = 10_000
"""Random sign assignments when there are too many for the exact test."""
EXACT_UP_TO = 16
"""Up to this many non-zero differences the sign-flip test enumerates all 2^n."""
SEED = 0


@dataclass(frozen=True)
class Interval:
    """A confidence interval [low, high] at `level`."""

    low: float
    high: float
    level: float = LEVEL

    def contains(self, x: float) -> bool:
        return self.low <= x <= self.high

    def as_list(self) -> list[float]:
        return [self.low, self.high]


@dataclass(frozen=True)
class TaskTally:
    """One task's samples in a batch: n finished, c of them passed."""

    n: int
    c: int


def _z(level: float) -> float:
    """The two-sided normal quantile for `level` (1.959964 for 0.95)."""
    return statistics.NormalDist().inv_cdf(0.5 + level / 2)


def wilson(successes: int, n: int, level: float = LEVEL) -> Interval:
    """The Wilson score interval of the rate successes/n (Wilson 1927). It stays inside
    [0, 1] and is not degenerate at 0 or n successes, unlike the normal approximation.
    Assumes n independent trials with one common rate. n = 0: the whole [0, 1]."""
    if not 0 <= successes <= n:
        raise ValueError(f"wilson needs 0 <= successes <= n (successes={successes}, n={n})")
    if n == 0:
        return Interval(0.0, 1.0, level)
    z = _z(level)
    p = successes / n
    denom = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    low = 0.0 if successes == 0 else max(0.0, center - half)  # exact ends, no rounding
    high = 1.0 if successes == n else min(1.0, center + half)
    return Interval(low, high, level)


def standard_error(values: Sequence[float]) -> float | None:
    """The standard error of the mean of `values`: s / sqrt(n), with s the sample
    standard deviation (n - 1 in its denominator). None for fewer than 2 values."""
    if len(values) < 2:
        return None
    return statistics.stdev(values) / math.sqrt(len(values))


def _percentile(ordered: Sequence[float], q: float) -> float:
    """The q-quantile of sorted values, linear between the nearest ranks."""
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def bootstrap_mean(
    values: Sequence[float],
    *,
    level: float = LEVEL,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> Interval | None:
    """The percentile bootstrap interval of the mean of `values` (Efron 1979): draw
    len(values) of them with replacement `resamples` times, take the middle `level` of
    the resampled means. Assumes the values are independent draws (here: tasks; a
    task's samples go into its one value, so they are never counted as independent).
    Seeded: the same values and seed give the same interval. None when empty."""
    if not values:
        return None
    return _bootstrap(tuple(values), level, resamples, seed)


@functools.lru_cache(maxsize=64)
def _bootstrap(values: tuple[float, ...], level: float, resamples: int, seed: int) -> Interval:
    """`bootstrap_mean`, remembered: a pure function of its arguments, asked again for
    the same values (a finished batch's page polled, pass@1 equal to the mean reward)."""
    n = len(values)
    if all(v == values[0] for v in values):
        return Interval(float(values[0]), float(values[0]), level)
    rng = random.Random(seed)
    # `choices`: floor(random() * n) per draw, as a loop of our own would, faster.
    means = sorted(sum(rng.choices(values, k=n)) / n for _ in range(resamples))
    tail = (1 - level) / 2
    return Interval(_percentile(means, tail), _percentile(means, 1 - tail), level)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k for one task: the chance that k of its n samples, drawn without
    replacement, all pass, C(c, k) / C(n, k) (c of the n passed, k <= n)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass^k needs 0 <= c <= n and 1 <= k <= n (n={n}, c={c}, k={k})")
    return math.comb(c, k) / math.comb(n, k)


def _over_tasks(
    values: list[float], level: float, seed: int
) -> tuple[float, Interval] | tuple[None, None]:
    if not values:
        return None, None
    interval = bootstrap_mean(values, level=level, seed=seed)
    assert interval is not None
    return statistics.fmean(values), interval


def pass_at_k_interval(
    tallies: Sequence[TaskTally], k: int, *, level: float = LEVEL, seed: int = SEED
) -> tuple[float, Interval] | tuple[None, None]:
    """Mean pass@k over the tasks with at least k samples, and its bootstrap interval
    over tasks; (None, None) when no task has k samples."""
    values = [pass_at_k(t.n, t.c, k) for t in tallies if t.n >= k]
    return _over_tasks(values, level, seed)


def pass_hat_k_interval(
    tallies: Sequence[TaskTally], k: int, *, level: float = LEVEL, seed: int = SEED
) -> tuple[float, Interval] | tuple[None, None]:
    """Mean pass^k over the tasks with at least k samples, and its bootstrap interval."""
    values = [pass_hat_k(t.n, t.c, k) for t in tallies if t.n >= k]
    return _over_tasks(values, level, seed)


def sign_flip_test(
    differences: Sequence[float], *, permutations: int = PERMUTATIONS, seed: int = SEED
) -> float:
    """The two-sided p-value of the paired sign-flip (permutation) test that the mean
    of `differences` is 0.

    Assumes the tasks are independent and that, under the null hypothesis, each task's
    difference is symmetric about 0 (the two runs are exchangeable within a task); it
    assumes no normality. Zero differences never change the statistic and are left
    out. With at most `EXACT_UP_TO` non-zero differences every sign assignment is
    counted (exact); else `permutations` seeded random ones, with the observed one
    counted in (p = (1 + hits) / (1 + permutations), never 0). No difference: 1.0."""
    nonzero = [d for d in differences if d != 0]
    if not nonzero:
        return 1.0
    observed = abs(sum(nonzero))
    # A sum equal to the observed one but for rounding counts as at least as far.
    edge = observed - 1e-9 * max(1.0, observed)
    if len(nonzero) <= EXACT_UP_TO:
        hits = sum(
            1
            for signs in itertools.product((1, -1), repeat=len(nonzero))
            if abs(sum(s * d for s, d in zip(signs, nonzero, strict=True))) >= edge
        )
        return hits / 2 ** len(nonzero)
    rng = random.Random(seed)
    tables = _signed_sums(nonzero)
    hits = 0
    for _ in range(permutations):
        # One random byte signs eight differences at once: its bit j flips the j-th.
        hits += abs(sum(map(getitem, tables, rng.randbytes(len(tables))))) >= edge
    return (1 + hits) / (1 + permutations)


def _signed_sums(values: Sequence[float]) -> list[list[float]]:
    """For each run of eight values, the 256 sums of them under every sign pattern
    (bit j of the pattern set: the j-th value negated)."""
    tables = []
    for start in range(0, len(values), 8):
        run = values[start : start + 8]
        tables.append(
            [
                sum(-v if pattern >> j & 1 else v for j, v in enumerate(run))
                for pattern in range(256)
            ]
        )
    return tables


def flips(a: Mapping[str, bool], b: Mapping[str, bool]) -> tuple[list[str], list[str]]:
    """The tasks in both whose verdict differs: (failed in a and passed in b, passed in
    a and failed in b), each sorted. The flip rate is their count over len(a & b)."""
    both = sorted(set(a) & set(b))
    return [t for t in both if not a[t] and b[t]], [t for t in both if a[t] and not b[t]]
