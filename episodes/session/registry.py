"""The live sessions one worker process holds, keyed by session id.

Temporal-free: the activities look sessions up here and the worker reaps them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from episodes.session.live import LiveSession


@dataclass
class Entry:
    session: LiveSession
    workflow_id: str
    run_id: str
    created: float = field(default_factory=time.monotonic)


class SessionRegistry:
    def __init__(self, max_sessions: int = 256) -> None:
        self.max_sessions = max_sessions
        self._entries: dict[str, Entry] = {}

    def add(self, session: LiveSession, workflow_id: str, run_id: str) -> None:
        self._entries[session.session_id] = Entry(session, workflow_id, run_id)

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
