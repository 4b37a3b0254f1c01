"""Attempts: the executions of one (task, sample) of a batch, and which one is final.

A (task, sample) of a batch is the episode `<batch>.<task>.s<sample>`
(`contract.episode_id`). It can run more than once:

- after an infrastructure failure, as a fresh episode `<id>.r<n>` (`retry_id`), by the
  batch workflow or a client-side batch; and after a cancel (a stale group);
- under the same id again, when its workflow failed and the batch is run again (a
  failed id may be reused).

Every figure of a batch (the viewer's batch page, `episodes run`'s summary, the batch
workflow's metrics, `episodes export`) counts the *final* attempt of each (task,
sample) and nothing else: the execution of the member that started last (`final_attempts`).
Attempts run one after the other, so that is the newest; the attempt number breaks a
tie, and where no start time is known it decides alone.

Standard library only: workflows import this module.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Iterable
from typing import Any, TypeVar

T = TypeVar("T")
_RETRY = re.compile(r"^(?P<member>.*\.s\d+)\.r(?P<attempt>\d+)$")


def retry_id(workflow_id: str, attempt: int) -> str:
    """A batch's fresh episode after an infrastructure failure: `<id>.r<attempt>`."""
    return workflow_id if attempt == 0 else f"{workflow_id}.r{attempt}"


def member_id(workflow_id: str) -> str:
    """The (task, sample) an attempt is of: its id without the `.r<n>` tail."""
    m = _RETRY.match(workflow_id)
    return m.group("member") if m else workflow_id


def attempt_of(workflow_id: str) -> int:
    """The attempt number in the id: 0 for the first, n for `<id>.r<n>`."""
    m = _RETRY.match(workflow_id)
    return int(m.group("attempt")) if m else 0


def final_attempts(
    attempts: Iterable[T],
    *,
    workflow_id: Callable[[T], str],
    started: Callable[[T], Any] | None = None,
    member: Callable[[T], Hashable] | None = None,
) -> list[T]:
    """The final attempt of each member (see the module doc), in first-seen order.

    `workflow_id` names each attempt; `started` gives its start time (comparable, or
    None when unknown); `member` its (task, sample) when that is not its id's
    (`member_id` by default). Of the attempts with equal keys, the later one given wins.
    """

    def order(item: T) -> tuple[bool, Any, int]:
        when = started(item) if started is not None else None
        return (when is not None, when if when is not None else 0, attempt_of(workflow_id(item)))

    final: dict[Hashable, T] = {}
    for item in attempts:
        key = member(item) if member is not None else member_id(workflow_id(item))
        if key not in final or order(item) >= order(final[key]):
            final[key] = item
    return list(final.values())
