"""A group's record: every member's turns, in the one payload its heartbeats and its
activity's result carry (`episodes.types.group.GroupProgress`), kept within bounds.

Temporal refuses a payload over 2 MB (the SDK refuses to send one: `PayloadsTooLarge`),
so a group whose members' turns outgrow it would run to its end and then fail with
nothing recorded. Without external payload storage the record is held below
`HISTORY_TURN_LIMIT` (the most one turn may take inline, room left for encryption):
each member's finished turn adds its encoded size, and past the bound the group stops
at once with a configuration error that says what to do (`GroupTooBig`: not retried,
the same spec would fail the same way). Heartbeats and the result are measured whole
before they are sent. With external storage the payload leaves the history as a
reference: no bound.
"""

from __future__ import annotations

import asyncio

from episodes.errors import GroupTooBig
from episodes.model.fastjson import encoded_size
from episodes.types.group import GroupProgress, MemberState
from episodes.types.results import TurnResult


class GroupRecord:
    def __init__(self, progress: GroupProgress, limit: int | None, group: str) -> None:
        """`limit`: the most the record may take, in bytes (None: no bound)."""
        self.progress = progress
        self.limit = limit
        self.group = group
        self.bytes = encoded_size(progress) if limit is not None else 0
        self.over = asyncio.Event()  # set once the record outgrew `limit`

    def grew(self, turn: TurnResult) -> None:
        """A member's finished turn joined the record."""
        if self.limit is not None:
            self.bytes += encoded_size(turn)
            self._check()

    async def outgrown(self) -> None:
        await self.over.wait()

    def fits(self) -> bool:
        """The whole record, measured now, is within the bound (what a heartbeat or the
        result may send)."""
        if self.limit is not None:
            self.bytes = encoded_size(self.progress)
            self._check()
        return not self.over.is_set()

    def _check(self) -> None:
        if self.limit is not None and self.bytes > self.limit:
            self.over.set()

    def error(self) -> GroupTooBig:
        assert self.limit is not None
        return GroupTooBig(
            f"group {self.group}: its members' turns reach {self.bytes / 1e6:.1f} MB, more "
            f"than one group may record ({self.limit / 1e6:.1f} MB in a Temporal payload): "
            "run fewer samples per group, or execution: episode, or store payloads "
            "externally (EPISODES_PAYLOADS_STORAGE)"
        )


class MemberSink:
    """A member's `episodes.session.drive.TurnSink`: its turns, recorded as they finish
    (what the heartbeat carries)."""

    stop = False

    def __init__(self, member: MemberState, record: GroupRecord) -> None:
        self.member = member
        self.record = record

    def add(self, result: TurnResult, *, send: bool = True) -> None:
        if result.record.turn == len(self.member.turns):
            self.member.turns.append(result)
            self.record.grew(result)

    async def wait_until_within(self, limit: int, lag_s: float = 0.0) -> None:
        return None

    async def finish(self) -> list[TurnResult]:
        return []
