"""Keep what goes into workflow history under Temporal's payload limits.

Temporal rejects a payload over 2 MB (and a workflow task that carries one gets
stuck). `record: full` (the default) records every turn whole: with external
storage on, a large turn leaves the history as a reference, so nothing is capped.
With no storage, a turn over `HISTORY_TURN_LIMIT` would break the episode, so it is
capped anyway (each marker says why) and the worker logs a warning.
`record: truncate` always caps: an oversized message, reply or event becomes an
explicit marker with its full size and a preview. The environment still sees the
full reply; only the history is trimmed.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Literal

import pydantic_core

from episodes.types.results import TurnRecord, TurnResult

MARKER = "__truncated__"
PREVIEW_CHARS = 2000
# The most one turn (its TurnResult JSON) may take inline in one `record_turns` Update:
# Temporal's limit is 2 MB per payload; this leaves room for encryption and the event.
HISTORY_TURN_LIMIT = 1536 * 1024
NO_STORAGE_REASON = (
    "turn too big for the history and no external storage is configured "
    "(set EPISODES_PAYLOADS_STORAGE to keep turns whole)"
)

log = logging.getLogger(__name__)


def json_size(value: Any) -> int:
    """The bytes `value` takes as compact UTF-8 JSON (as the record is stored; anything
    else measured by its str()): the measure of the caps here and of a session's event
    budget. pydantic_core's `to_json`, ~5x faster than measuring `json.dumps`."""
    try:
        return len(pydantic_core.to_json(value, fallback=str))
    except ValueError:  # deeper than pydantic_core recurses: the standard library's
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
        return len(text.encode("utf-8", "surrogatepass"))


def cap(value: Any, max_bytes: int, *, reason: str | None = None) -> tuple[Any, int]:
    """(value, size) — the value itself if it fits, else a marker describing it."""
    size = json_size(value)
    if size <= max_bytes:
        return value, size
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    marker = {MARKER: True, "bytes": size, "preview": text[:PREVIEW_CHARS]}
    if reason:
        marker["reason"] = reason
    return marker, PREVIEW_CHARS + 64 + len(reason or "")


def cap_record(
    record: TurnRecord, *, max_value_bytes: int, max_turn_bytes: int, reason: str | None = None
) -> TurnRecord:
    """Cap each value, then drop events past the turn budget (counted in a final marker)."""
    message, used = cap(record.message, max_value_bytes, reason=reason)
    reply, size = cap(record.reply, max_value_bytes, reason=reason)
    used += size
    error = record.error
    if error is not None and len(error) > max_value_bytes:
        error = error[:max_value_bytes] + f"... [{MARKER}: {len(error)} chars]"
    events: list[Any] = []
    dropped = dropped_bytes = 0
    for event in record.events:
        capped, size = cap(event, max_value_bytes, reason=reason)
        if used + size > max_turn_bytes:
            dropped += 1
            dropped_bytes += json_size(event)
            continue
        used += size
        events.append(capped)
    if dropped:
        marker: dict[str, Any] = {MARKER: True, "dropped_events": dropped, "bytes": dropped_bytes}
        if reason:
            marker["reason"] = reason
        events.append(marker)
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


def cap_result(
    result: TurnResult, *, max_value_bytes: int, max_turn_bytes: int, reason: str | None = None
) -> TurnResult:
    """`cap_record` on the record, `cap` on the observation's next message."""
    record = cap_record(
        result.record,
        max_value_bytes=max_value_bytes,
        max_turn_bytes=max_turn_bytes,
        reason=reason,
    )
    message, _ = cap(result.observation.message, max_value_bytes, reason=reason)
    if record is result.record and message is result.observation.message:
        return result
    observation = result.observation.model_copy(update={"message": message})
    return result.model_copy(update={"record": record, "observation": observation})


def fit_result(
    result: TurnResult,
    *,
    mode: Literal["full", "truncate"],
    max_value_bytes: int,
    max_turn_bytes: int,
    history_limit_bytes: int | None,
    where: str = "turn",
) -> TurnResult:
    """What the history records of a turn: whole (`full`), unless it cannot fit there."""
    if mode == "truncate":
        return cap_result(result, max_value_bytes=max_value_bytes, max_turn_bytes=max_turn_bytes)
    if history_limit_bytes is None:
        return result  # external storage (or no history at all): every byte is kept
    size = len(pydantic_core.to_json(result))
    if size <= history_limit_bytes:
        return result
    log.warning(
        "%s is %d bytes, over the %d one turn may take in the history without external "
        "storage: recording it truncated (set EPISODES_PAYLOADS_STORAGE to keep it whole)",
        where,
        size,
        history_limit_bytes,
    )
    return cap_result(
        result,
        max_value_bytes=max_value_bytes,
        max_turn_bytes=max_turn_bytes,
        reason=NO_STORAGE_REASON,
    )
