"""Aggregate metrics of a batch: pure, bounded, and carried across continue-as-new.

`MetricsAccumulator` is a pydantic model, so the batch workflow passes it to its next
run as it is. Its size does not grow with the number of episodes:

- rewards: a count and a sum (mean over the episodes that have a reward);
- pass@k: per task only while its samples are still arriving (`open_tasks`); once a
  task has all `samples` results its pass@1..samples values are folded into running
  sums and the task is forgotten. Work runs task by task, so few tasks are open;
- durations: a log-bucketed histogram (relative error under 1%, `DurationSketch`);
- groups (a task's samples): complete, or failed when a member ended for an
  infrastructure reason after its retries, counted as each task closes; complete
  groups whose members all scored the same (zero variance: no GRPO signal) too.

One `add` per (task, sample): its final attempt (`episodes.types.attempts`); the
batch workflow adds each child's outcome after its re-runs. An attempt it replaced
(run again after an infrastructure failure) is only `spend`: its model calls, tokens
and episode time count against the batch's budget (`model_calls`, `model_tokens`,
`episode_seconds`), never in rewards, terminations or durations.

Pass: an episode passes when its reward is not None and `reward >= pass_threshold`
(default 1.0: only fully correct episodes pass). pass@k is the unbiased estimator of
Chen et al. (2021), 1 - C(n-c, k) / C(n, k) for a task with n samples of which c
pass, averaged over the tasks with at least k finished samples.

Only pydantic and the standard library: workflows import this module.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from pydantic import Field

from episodes.types.base import Model
from episodes.types.cost import Cost

# Histogram bucket i holds durations in (GAMMA**(i-1), GAMMA**i]. Reporting the bucket's
# midpoint 2*GAMMA**i/(GAMMA+1) is off by at most (GAMMA-1)/(GAMMA+1) < 1% relatively.
GAMMA = 1.02
# Below this (1 ms) durations are counted as zero: nothing an episode does is that fast.
MIN_DURATION_S = 1e-3


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one task: n samples, c of them passing, k <= n."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n (n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def report_ks(ks: Iterable[int]) -> list[int]:
    """The k worth showing out of many: 1, 2, 5, 10, 20, 50, ... and the largest."""
    ks = sorted(ks)
    if not ks:
        return []
    shown = [k for k in ks if _round_number(k)]
    return shown if shown[-1:] == ks[-1:] else [*shown, ks[-1]]


def _round_number(k: int) -> bool:
    while k >= 10 and k % 10 == 0:
        k //= 10
    return k in (1, 2, 5)


class DurationSketch(Model):
    """A log-histogram of durations with exact count, sum, min and max."""

    count: int = 0
    zeros: int = 0
    buckets: dict[int, int] = Field(default_factory=dict)
    sum_s: float = 0.0
    min_s: float | None = None
    max_s: float | None = None

    def add(self, seconds: float) -> None:
        seconds = max(0.0, seconds)
        self.count += 1
        self.sum_s += seconds
        self.min_s = seconds if self.min_s is None else min(self.min_s, seconds)
        self.max_s = seconds if self.max_s is None else max(self.max_s, seconds)
        if seconds <= MIN_DURATION_S:
            self.zeros += 1
            return
        i = math.ceil(math.log(seconds) / math.log(GAMMA))
        self.buckets[i] = self.buckets.get(i, 0) + 1

    def quantile(self, q: float) -> float | None:
        """Nearest-rank quantile (the value at rank ceil(q*n)), within 1% of the exact one."""
        if not self.count:
            return None
        assert self.min_s is not None and self.max_s is not None
        rank = max(1, math.ceil(q * self.count))
        if rank <= self.zeros:
            return self.min_s
        seen = self.zeros
        for i in sorted(self.buckets):
            seen += self.buckets[i]
            if seen >= rank:
                estimate = 2 * GAMMA**i / (GAMMA + 1)
                return min(max(estimate, self.min_s), self.max_s)
        return self.max_s


class DurationSummary(Model):
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    mean: float | None = None
    min: float | None = None
    max: float | None = None


class BatchMetrics(Model):
    """What a batch reports: while running (the `metrics` query) and as its result."""

    count: int = 0
    rewarded: int = 0
    """Episodes with a reward (mean_reward is over these)"""
    mean_reward: float | None = None
    passed: int = 0
    pass_threshold: float = 1.0
    samples: int = 1
    pass_at_k: dict[int, float] = Field(default_factory=dict)
    """K -> mean pass@k over the tasks with at least k finished samples (k =
    1..samples)."""
    pass_at_k_tasks: dict[int, int] = Field(default_factory=dict)
    """K -> how many tasks pass_at_k[k] averages over."""
    terminations: dict[str, int] = Field(default_factory=dict)
    duration_s: DurationSummary = Field(default_factory=DurationSummary)
    infra_failures: int = 0
    """Episodes that ended for an infrastructure reason (a lost worker after its
    restarts, a model upstream that gave up, a failed provision) even after
    `batch_retries`: not the agent's doing. Agent outcomes are every other termination."""
    retried: int = 0
    """Fresh episodes run again after an infrastructure failure (`<id>.r1`, ...)."""
    model_calls: int = 0
    """Calls through the sessions' model proxies, and the tokens the upstream reported
    for them, over the finished episodes (what `spec.budget` counts)."""
    model_tokens: int = 0
    episode_seconds: float = 0.0
    """The finished episodes' time, summed (each held a box for about as long); like
    the model calls and tokens, every attempt of each (an episode run again after an
    infrastructure failure spent too)."""
    parked: int = 0
    """Episodes in flight that are parked (`episodes park`: no box, `resume` goes on),
    while the batch runs: its `metrics` query (a client's batch:
    `episodes.client.batch.live.LiveFigure.parked`). 0 in a finished batch's result."""
    groups_complete: int = 0
    """Groups (a task's samples in the batch, `contract.group_id`) whose every member
    ended with an outcome of the agent's or the env's: a trainer may learn from them."""
    groups_failed: int = 0
    """Groups with a member that ended for an infrastructure reason even after its
    retries: a trainer masks the whole group (its baseline would be biased)."""
    groups_zero_variance: int = 0
    """Complete groups whose every member has a reward and all are equal: every
    advantage is 0, no GRPO signal (`Group.zero_variance`; with one sample per task,
    every rewarded group)."""
    cost: Cost | None = None
    """What the priced episodes cost (the spec's `prices`), summed; None: none priced."""
    priced: int = 0
    """Episodes with a cost (those finished under a price table)."""


class PassTally(Model):
    n: int = 0
    passed: int = 0
    infra: int = 0
    """Members that ended for an infrastructure reason (0 in histories from before)."""
    rewarded: int = 0
    """Members with a reward (0 in histories from before: never zero variance)."""
    first: float | None = None
    varied: bool = False
    """A member's reward differed from the first one's."""


class MetricsAccumulator(Model):
    """Running totals of a batch; `add` one episode, `summary()` at any time."""

    samples: int = Field(default=1, ge=1)
    pass_threshold: float = 1.0
    count: int = 0
    rewarded: int = 0
    reward_sum: float = 0.0
    passed: int = 0
    terminations: dict[str, int] = Field(default_factory=dict)
    open_tasks: dict[str, PassTally] = Field(default_factory=dict)
    closed_tasks: int = 0
    closed_pass_sums: list[float] = Field(default_factory=list)
    """Index k-1: the sum of pass@k over the closed tasks."""
    durations: DurationSketch = Field(default_factory=DurationSketch)
    infra_failures: int = 0
    retried: int = 0
    groups_complete: int = 0
    groups_failed: int = 0
    groups_zero_variance: int = 0
    model_calls: int = 0
    model_tokens: int = 0
    cost: Cost | None = None
    priced: int = 0
    replaced_seconds: float = 0.0
    """Episode time of the attempts run again (`spend`): not in `durations`, which
    holds each member's final attempt (0 in histories from before)."""

    @property
    def episode_seconds(self) -> float:
        """Every attempt's episode time: what `max_episode_seconds` counts."""
        return self.durations.sum_s + self.replaced_seconds

    def spend(
        self,
        *,
        model_calls: int,
        model_tokens: int,
        duration_s: float,
        cost: Cost | None = None,
    ) -> None:
        """Count what an attempt that was run again spent (see the module doc)."""
        if cost is not None:
            self.cost = cost if self.cost is None else self.cost.plus(cost)
        self.model_calls += max(0, model_calls)
        self.model_tokens += max(0, model_tokens)
        self.replaced_seconds += max(0.0, duration_s)

    def passes(self, reward: float | None) -> bool:
        return reward is not None and reward >= self.pass_threshold

    def add(
        self,
        task_id: str,
        termination: str,
        reward: float | None,
        duration_s: float,
        *,
        infra: bool = False,
        retries: int = 0,
        model_calls: int = 0,
        model_tokens: int = 0,
        cost: Cost | None = None,
    ) -> None:
        self.count += 1
        if cost is not None:
            self.cost = cost if self.cost is None else self.cost.plus(cost)
            self.priced += 1
        self.model_calls += max(0, model_calls)
        self.model_tokens += max(0, model_tokens)
        self.infra_failures += infra
        self.retried += retries
        self.terminations[termination] = self.terminations.get(termination, 0) + 1
        if reward is not None:
            self.rewarded += 1
            self.reward_sum += reward
        passed = self.passes(reward)
        self.passed += passed
        self.durations.add(duration_s)
        tally = self.open_tasks.setdefault(task_id, PassTally())
        tally.n += 1
        tally.passed += passed
        tally.infra += infra
        if reward is not None:
            tally.rewarded += 1
            if tally.first is None:
                tally.first = reward
            tally.varied = tally.varied or reward != tally.first
        if tally.n >= self.samples:
            self._close(task_id)

    def _close(self, task_id: str) -> None:
        tally = self.open_tasks.pop(task_id)
        if len(self.closed_pass_sums) < self.samples:
            self.closed_pass_sums += [0.0] * (self.samples - len(self.closed_pass_sums))
        for k in range(1, self.samples + 1):
            self.closed_pass_sums[k - 1] += pass_at_k(tally.n, tally.passed, k)
        self.closed_tasks += 1
        if tally.infra:
            self.groups_failed += 1
        else:
            self.groups_complete += 1
            if tally.rewarded == tally.n and not tally.varied:
                self.groups_zero_variance += 1

    def summary(self) -> BatchMetrics:
        pass_at: dict[int, float] = {}
        tasks_at: dict[int, int] = {}
        for k in range(1, self.samples + 1):
            total = self.closed_pass_sums[k - 1] if self.closed_pass_sums else 0.0
            tasks = self.closed_tasks
            for tally in self.open_tasks.values():
                if tally.n >= k:
                    total += pass_at_k(tally.n, tally.passed, k)
                    tasks += 1
            if tasks:
                pass_at[k] = total / tasks
                tasks_at[k] = tasks
        d = self.durations
        return BatchMetrics(
            count=self.count,
            rewarded=self.rewarded,
            mean_reward=self.reward_sum / self.rewarded if self.rewarded else None,
            passed=self.passed,
            pass_threshold=self.pass_threshold,
            samples=self.samples,
            pass_at_k=pass_at,
            pass_at_k_tasks=tasks_at,
            terminations=dict(sorted(self.terminations.items())),
            infra_failures=self.infra_failures,
            retried=self.retried,
            groups_complete=self.groups_complete,
            groups_failed=self.groups_failed,
            groups_zero_variance=self.groups_zero_variance,
            model_calls=self.model_calls,
            model_tokens=self.model_tokens,
            cost=self.cost,
            priced=self.priced,
            episode_seconds=self.episode_seconds,
            duration_s=DurationSummary(
                p50=d.quantile(0.5),
                p90=d.quantile(0.9),
                p99=d.quantile(0.99),
                mean=d.sum_s / d.count if d.count else None,
                min=d.min_s,
                max=d.max_s,
            ),
        )
