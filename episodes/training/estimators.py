"""Advantages: how much better each episode of a group did than its group, by one rule.

    advantages([1.0, 0.0, 1.0])                      # grpo: reward - the group's mean
    advantages([1.0, 0.0, 1.0], estimator="rloo")    # reward - the mean of the others
    advantages([1.0, None])                          # [None, None]: no baseline

The export (`episodes export`, `episodes.training.export`), a streamed `Group`
(`Group.advantages()`), the viewer's batch page and a Python trainer all call these
functions, so they never disagree.

Estimators (`ESTIMATORS`):

- `grpo`: reward minus the group's mean reward (GRPO's group baseline); with
  `normalize_std`, divided by the group's sample standard deviation + `STD_EPSILON`
  (so a group whose rewards are all equal gives 0, not a division by zero).
- `rloo`: reward minus the mean reward of the group's *other* members (REINFORCE
  leave-one-out: no episode is its own baseline); `n / (n - 1)` times grpo's. A group
  of one has no other member: 0. `normalize_std` divides by the same std.

A missing reward (an env that failed to score, a member still running, a workflow that
failed, or with `include_diverged=False` an episode whose replay diverged) gives its
**whole group** no advantage (None for every member): a baseline over the members that
have a reward is biased (the ones without are not a random subset: env errors and lost
workers cluster on hard tasks), and a reward is never made up (0 for a missing one
would teach the policy against an infrastructure failure).

Diverged episodes: a restarted, resumed or forked episode replays its recorded turns;
a replayed turn whose request differed from the recorded one is a divergence
(`EpisodeResult.replay_divergences`, docs/failures.md#exact-replay): the transcript
keeps the recorded reply while the harness had gone its own way, so its reward is that
of a run its transcript does not quite describe. `include_diverged=False` treats such
a reward as missing (and leaves the episode's samples out: `episodes.training.export`).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from typing import Literal, get_args

from episodes.types.results import EpisodeResult

Estimator = Literal["grpo", "rloo"]
ESTIMATORS: tuple[str, ...] = get_args(Estimator)
STD_EPSILON = 1e-4


def advantages(
    rewards: Sequence[float | None],
    *,
    estimator: Estimator = "grpo",
    normalize_std: bool = False,
) -> list[float | None]:
    """One group's advantages, in the order of its members' `rewards` (see the module
    doc); all None when any reward is missing."""
    if any(r is None for r in rewards):
        return [None] * len(rewards)
    values = [float(r) for r in rewards if r is not None]
    if not values:
        return []
    n, mean = len(values), statistics.fmean(values)
    scale = 1.0
    if normalize_std:
        scale = (statistics.stdev(values) if n > 1 else 0.0) + STD_EPSILON
    if estimator == "grpo":
        return [(v - mean) / scale for v in values]
    if estimator == "rloo":
        if n == 1:
            return [0.0]
        return [(v - (mean * n - v) / (n - 1)) / scale for v in values]
    raise ValueError(f"estimator {estimator!r}: one of {', '.join(ESTIMATORS)}")


def diverged(result: EpisodeResult) -> bool:
    """Whether the episode's replay (a restart, resume or fork) diverged from its record."""
    return result.replay_divergences > 0


def reward_of(result: EpisodeResult, *, include_diverged: bool = True) -> float | None:
    """The reward an advantage is computed from: None (missing) for a diverged episode
    unless `include_diverged`."""
    if not include_diverged and diverged(result):
        return None
    return result.reward


def episode_advantages(
    results: Sequence[EpisodeResult],
    *,
    estimator: Estimator = "grpo",
    normalize_std: bool = False,
    include_diverged: bool = True,
) -> dict[str, float | None]:
    """Each episode's advantage within its task's group (the results of one batch), by
    workflow id: `advantages` over each task's rewards (`reward_of`)."""
    groups: dict[str, list[EpisodeResult]] = defaultdict(list)
    for r in results:
        groups[r.task_id].append(r)
    out: dict[str, float | None] = {}
    for members in groups.values():
        rewards = [reward_of(m, include_diverged=include_diverged) for m in members]
        values = advantages(rewards, estimator=estimator, normalize_std=normalize_std)
        out.update((m.workflow_id, v) for m, v in zip(members, values, strict=True))
    return out
