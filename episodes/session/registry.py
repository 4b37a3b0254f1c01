"""The live sessions one worker process holds, keyed by session id.

Temporal-free: the activities look sessions up here and the worker reaps them.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from episodes.session.live import LiveSession

# Past a session's own wait (a turn, an interactive pause): its workflow's score and
# release are scheduled within this, on a healthy server.
REAP_GRACE_S = 300.0


@dataclass
class Entry:
    session: LiveSession
    workflow_id: str
    run_id: str
    created: float = field(default_factory=time.monotonic)
    # How long the session may legitimately sit untouched: its spec's turn_timeout_s or
    # its interactive idle_timeout_s, plus grace. The reaper's TTL never cuts it shorter.
    patience_s: float = 0.0
    active: int = 0  # activities (a drive, a turn, a score) working on it now

    @property
    def busy(self) -> bool:
        """In use however long ago it was touched: never idle, never reaped for idling."""
        return self.active > 0 or self.session.busy


class SessionRegistry:
    def __init__(self, max_sessions: int = 256) -> None:
        self.max_sessions = max_sessions
        self._entries: dict[str, Entry] = {}

    def add(
        self,
        session: LiveSession,
        workflow_id: str,
        run_id: str,
        *,
        waits_s: float = 0.0,
    ) -> None:
        """`waits_s`: how long the session may legitimately sit untouched (its spec's
        turn_timeout_s, an interactive session's idle_timeout_s)."""
        self._entries[session.session_id] = Entry(
            session, workflow_id, run_id, patience_s=waits_s + REAP_GRACE_S
        )

    @contextlib.contextmanager
    def in_use(self, session_id: str) -> Iterator[None]:
        """While an activity works on the session (it is busy, see `Entry.busy`)."""
        entry = self._entries.get(session_id)
        if entry is not None:
            entry.active += 1
        try:
            yield
        finally:
            if entry is not None:
                entry.active -= 1

    def follow(self, session_id: str, run_id: str) -> None:
        """The session's workflow continued-as-new: its run now is `run_id`."""
        entry = self._entries.get(session_id)
        if entry is not None:
            entry.run_id = run_id

    def get(self, session_id: str) -> LiveSession | None:
        entry = self._entries.get(session_id)
        return entry.session if entry else None

    def pop(self, session_id: str) -> LiveSession | None:
        entry = self._entries.pop(session_id, None)
        return entry.session if entry else None

    def entries(self) -> list[Entry]:
        return list(self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, session_id: str) -> bool:
        return session_id in self._entries
