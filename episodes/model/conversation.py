"""Record a model call as what it adds to a conversation the session already recorded.

An agent resends its whole conversation on every call, so recording each request
whole makes the record grow with the square of its steps (200 calls of 2 KB
messages: ~40 MB). The proxy records instead the messages a call adds, with a
reference to the earlier call whose conversation it extends:

    {"kind": "model_call", "id": "3f9a1c-7",
     "extends": {"id": "3f9a1c-6", "messages": 12},      # its first 12 messages, then
     "request": {..., "messages": [<the new ones>]}, ...}

The full conversation of a call is the referenced call's full conversation cut to
`messages`, then its own. `resolve_messages` (episodes/types/events.py) rebuilds it
when a transcript is read; a record without `extends` holds the whole conversation
(every record written before this existed reads as it always did).
"""

from __future__ import annotations

import secrets
from typing import Any

# How many recent conversations a session's proxy compares a new request with: an
# agent that keeps a few at once (a planner and its sub-agents) still extends one.
RECENT = 4


def common_prefix(old: list[Any], new: list[Any]) -> int:
    """How many leading messages `new` shares with `old` (compared by value)."""
    n = len(old)
    if n <= len(new) and new[:n] == old:  # the usual case, one C-level comparison
        return n
    m = 0
    for a, b in zip(old, new, strict=False):
        if a != b:
            break
        m += 1
    return m


class Conversations:
    """One session's recent conversations, by the id of the call that sent each."""

    def __init__(self) -> None:
        # Ids are unique across a session's proxies (a restored session gets a new one).
        self._prefix = secrets.token_hex(3)
        self._count = 0
        self._recent: list[tuple[str, list[Any]]] = []

    def record(self, messages: Any) -> tuple[str, Any, dict[str, Any] | None]:
        """(this call's id, the messages to record, the reference or None) for a request's
        `messages`; the call becomes a conversation later calls may extend.

        Hazard: the reference is only as good as the record of the call it names. A
        caller that drops a recorded call (a restore's replayed turns) must `forget()`.
        """
        self._count += 1
        call_id = f"{self._prefix}-{self._count}"
        if not isinstance(messages, list):
            return call_id, messages, None
        best, base = 0, None
        for old_id, old in self._recent:
            m = common_prefix(old, messages)
            if m > best:
                best, base = m, old_id
        self._recent = [(call_id, messages), *self._recent[: RECENT - 1]]
        if base is None:
            return call_id, messages, None
        return call_id, messages[best:], {"id": base, "messages": best}

    def forget(self) -> None:
        """Later calls name none of the earlier ones (they were not kept)."""
        self._recent = []
