"""Which groups are whole: the one selection the export and a trainer make before
computing advantages.

    picked = whole_groups(members, group=lambda m: m.group_id, ended=lambda m: m.result is not None)
    picked.whole      # {group id: its members}, every member ended
    picked.partial    # {group id: its members that did not end}, for the groups missing one

A group (`episodes.contract.group_id`: a task's samples in a batch) is *whole* when
every member has a result. A group with a member still running, or whose workflow
failed without a result, has no baseline: computing advantages over the members that
ended would bias them (`episodes.training.advantages`). `episodes export` fails on such
a group, or leaves it out whole with `--skip-incomplete`; the viewer's batch page shows
it without advantages. Pure: members are whatever the caller holds (workflow
executions, visibility rows), told apart by the two functions given.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

M = TypeVar("M")


@dataclass(frozen=True)
class WholeGroups(Generic[M]):
    whole: dict[str, list[M]] = field(default_factory=dict)
    """Group id -> its members, in the order given, for each group whose every member ended."""
    partial: dict[str, list[M]] = field(default_factory=dict)
    """Group id -> its members that did not end, for each group missing one (by group id)."""

    def members(self) -> list[M]:
        """The members of the whole groups, group after group."""
        return [m for members in self.whole.values() for m in members]


def whole_groups(
    members: Iterable[M], *, group: Callable[[M], str], ended: Callable[[M], bool]
) -> WholeGroups[M]:
    """Split `members` by `group` into whole groups and the groups missing a member's
    result (`ended` false): see the module doc."""
    groups: dict[str, list[M]] = {}
    for m in members:
        groups.setdefault(group(m), []).append(m)
    partial = {
        g: [m for m in ms if not ended(m)]
        for g, ms in sorted(groups.items())
        if not all(ended(m) for m in ms)
    }
    return WholeGroups(
        whole={g: ms for g, ms in groups.items() if g not in partial}, partial=partial
    )
