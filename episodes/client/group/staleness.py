"""Staleness: how far a group's versions may trail the trainer's (`max_staleness`, `on_stale`).

A groups stream with `max_staleness=K` and a policy version chooses what to do with a
group that is not complete while the trainer (`client.policy_version`) is more than K
versions past it:

- `on_stale="keep"` (the default): nothing is cancelled for its age. Admission is
  paced instead: no new group starts while the oldest group still running is more
  than K versions behind, and no complete group is handed out past it (the trainer
  would step on without it). The trainer so moves at most K + 1 versions past the
  oldest rollout it has not received, and a slow group is trained, late but whole.
  (AReaL's `max_head_offpolicyness`, verl's fully async `staleness_threshold` and
  prime-rl's `max_off_policy_steps` bound off-policyness the same way: by what they
  admit, not by what they throw away.)
- `on_stale="requeue"`: the stale group is cancelled and dispatched again from the
  start at the current version (what every stream did before `on_stale`). A task
  slower than K training steps can starve: docs/trainers.md measures both.

Groups dispatched by an earlier run of the batch (a trainer that restarted: their
versions come from the batch's receipts, `episodes.client.group.receipts`) are handed out
as they end, oldest first: they hold back nothing, they only hold admission.

`oldest_serving_version` is the one place that says which version a group's lag is
counted from. Today it is the version the group was dispatched at; once each model
call records the version that served it, it is the oldest of those.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

OnStale = Literal["keep", "requeue"]
ON_STALE: tuple[OnStale, ...] = ("keep", "requeue")


def oldest_serving_version(dispatched: int | None) -> int | None:
    """The oldest policy version that served any of a group's tokens: for now the
    version its members were dispatched at (every call of theirs is served at that
    version or a newer one)."""
    return dispatched


def lag(current: int | None, oldest: int | None) -> int | None:
    """`Group.staleness`: the trainer's version minus the group's oldest serving version
    (None when either is unversioned)."""
    if current is None or oldest is None:
        return None
    return current - oldest


@dataclass(frozen=True)
class Running:
    """What pacing needs of a group still running: its oldest serving version, and
    whether an earlier run of the batch dispatched it."""

    version: int | None
    restored: bool = False


@dataclass(frozen=True)
class Pacing:
    """`max_staleness` and `on_stale` as a stream applies them."""

    max_staleness: int | None
    on_stale: OnStale = "keep"

    @property
    def keep(self) -> bool:
        return self.max_staleness is not None and self.on_stale == "keep"

    @property
    def requeue(self) -> bool:
        return self.max_staleness is not None and self.on_stale == "requeue"

    def stale(self, current: int | None, version: int | None) -> bool:
        """More than `max_staleness` versions behind `current`."""
        if self.max_staleness is None:
            return False
        behind = lag(current, oldest_serving_version(version))
        return behind is not None and behind > self.max_staleness

    def admits(self, current: int | None, running: Iterable[Running]) -> bool:
        """`keep`: a new group may start (no running group is stale)."""
        return not self.keep or not any(self.stale(current, r.version) for r in running)

    def holds(self, current: int | None, running: Iterable[Running]) -> bool:
        """`keep`: complete groups this run dispatched wait (a group it dispatched is
        still running and stale: the trainer must not step on past it)."""
        return self.keep and any(not r.restored and self.stale(current, r.version) for r in running)


def yield_order(version: int | None, index: int) -> tuple[int, int]:
    """Complete groups go out oldest version first, then in task order."""
    v = oldest_serving_version(version)
    return (-1 if v is None else v, index)
