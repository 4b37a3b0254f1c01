"""Keep what goes into workflow history under Temporal's payload limits.

Temporal rejects a payload over 2 MB (and a workflow task that carries one gets
stuck), so a turn's record is capped before it leaves the worker: an oversized
message, reply or event becomes an explicit marker with its full size and a
preview. The environment still sees the full reply; only the history is trimmed.
"""

from __future__ import annotations

import json
from typing import Any

from episodes.models import TurnRecord

MARKER = "__truncated__"
PREVIEW_CHARS = 2000


def json_size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, default=str).encode("utf-8"))


def cap(value: Any, max_bytes: int) -> tuple[Any, int]:
    """(value, size) — the value itself if it fits, else a marker describing it."""
    size = json_size(value)
    if size <= max_bytes:
        return value, size
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return {MARKER: True, "bytes": size, "preview": text[:PREVIEW_CHARS]}, PREVIEW_CHARS + 64


def cap_record(record: TurnRecord, *, max_value_bytes: int, max_turn_bytes: int) -> TurnRecord:
    """Cap each value, then drop events past the turn budget (counted in a final marker)."""
    message, used = cap(record.message, max_value_bytes)
    reply, size = cap(record.reply, max_value_bytes)
    used += size
    error = record.error
    if error is not None and len(error) > max_value_bytes:
        error = error[:max_value_bytes] + f"... [{MARKER}: {len(error)} chars]"
    events: list[Any] = []
    dropped = dropped_bytes = 0
    for event in record.events:
        capped, size = cap(event, max_value_bytes)
        if used + size > max_turn_bytes:
            dropped += 1
            dropped_bytes += json_size(event)
            continue
        used += size
        events.append(capped)
    if dropped:
        events.append({MARKER: True, "dropped_events": dropped, "bytes": dropped_bytes})
    if (message, reply, error, events) == (
        record.message,
        record.reply,
        record.error,
        record.events,
    ):
        return record
    return record.model_copy(
        update={"message": message, "reply": reply, "error": error, "events": events}
    )
