"""Text search across a batch's transcripts: server-side, streamed, bounded.

Each episode's history is read and decoded in turn (a few at a time), searched and
dropped, so memory holds a handful of transcripts whatever the batch's size; hits are
yielded as they are found, and the search stops at `max_hits` or after `max_episodes`.
What is searched is what people read: the messages the env sent, the harness's
replies and errors, tool calls (arguments, results) and the text a model sampled
(not its request: every call repeats the conversation so far, and would hit again).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

from temporalio.client import Client

from episodes.client.histories.transcript import load_transcript
from episodes.viewer.members import batch_rows

MAX_EPISODES = 1_000
MAX_HITS = 200
SNIPPET = 80  # characters of context either side of a hit
PARALLEL = 4


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def searchable(turn: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, text) of one TurnResult dict: the places a person reads."""
    rec = turn.get("record") or {}
    yield "message", _text(rec.get("message"))
    yield "reply", _text(rec.get("reply"))
    if rec.get("error"):
        yield "error", _text(rec.get("error"))
    for i, ev in enumerate(rec.get("events") or []):
        kind = ev.get("kind") if isinstance(ev, dict) else None
        if kind == "tool_call":
            yield (
                f"events.{i}",
                _text({k: ev.get(k) for k in ("name", "arguments", "result", "error")}),
            )
        elif kind == "model_call":
            choices = (ev.get("response") or {}) if isinstance(ev.get("response"), dict) else {}
            said = [c.get("message") for c in choices.get("choices") or [] if isinstance(c, dict)]
            yield f"events.{i}", _text(said)
        else:
            yield f"events.{i}", _text(ev)


def find(text: str, needle: str) -> str | None:
    """A snippet around the first case-insensitive occurrence of `needle`, or None."""
    at = text.lower().find(needle)
    if at < 0:
        return None
    lo, hi = max(0, at - SNIPPET), min(len(text), at + len(needle) + SNIPPET)
    return ("…" if lo else "") + text[lo:hi] + ("…" if hi < len(text) else "")


async def search_batch(
    client: Client,
    batch: str,
    query: str,
    *,
    max_episodes: int = MAX_EPISODES,
    max_hits: int = MAX_HITS,
) -> AsyncIterator[dict[str, Any]]:
    """Hits (`{"id", "task", "sample", "turn", "where", "snippet"}`) as found, then one
    `{"done": true, "scanned", "episodes", "hits", "truncated"}`."""
    needle = query.lower()
    rows, _ = await batch_rows(client, batch)
    rows.sort(key=lambda r: (r.get("task") or "", r.get("sample") or 0, r["id"]))
    todo = rows[:max_episodes]
    hits = scanned = 0
    truncated = len(rows) > max_episodes

    async def load(r: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        return r, await load_transcript(client, r["id"], tolerant=True)

    pending: list[asyncio.Task[tuple[dict[str, Any], dict[str, Any]]]] = []
    queue = iter(todo)
    try:
        while hits < max_hits:
            while len(pending) < PARALLEL and (nxt := next(queue, None)) is not None:
                pending.append(asyncio.ensure_future(load(nxt)))
            if not pending:
                break
            r, data = await pending.pop(0)  # in order: hits read like the batch page
            scanned += 1
            for t, where, snippet in _hits(data["turns"], needle):
                hits += 1
                yield {
                    "id": r["id"],
                    "task": r.get("task"),
                    "sample": r.get("sample"),
                    "turn": (t.get("record") or {}).get("turn"),
                    "where": where,
                    "snippet": snippet,
                }
                if hits >= max_hits:
                    truncated = True
                    break
    finally:
        for task in pending:  # a client gone, or enough hits: stop reading histories
            task.cancel()
    yield {
        "done": True,
        "scanned": scanned,
        "episodes": len(rows),
        "hits": hits,
        "truncated": truncated or scanned < len(todo),
    }


def _hits(turns: list[dict[str, Any]], needle: str) -> Iterator[tuple[dict[str, Any], str, str]]:
    for t in turns:
        for where, text in searchable(t):
            snippet = find(text, needle)
            if snippet is not None:
                yield t, where, snippet
