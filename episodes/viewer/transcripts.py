"""One episode for the viewer: its transcript from history, paged and clipped, and its
live turns from the `progress` query.

Hazards this module exists for:
- a 1,000-turn episode: the API hands out pages of turns, never the whole transcript;
- a 20 MB model call: list views get every value clipped (long strings cut, long lists
  keep their ends, each part within a byte budget) and name what was clipped; the page
  fetches one part whole on demand (`part`);
- encrypted payloads without the key: the history is read tolerantly, so what cannot
  be decoded is a placeholder, never a failed page;
- JSON has no NaN or infinity (a logprob of -inf is legal in Python): such floats are
  sent as strings.

A closed episode's decoded transcript is cached (a few, least recently used): paging
through it reads the history once. A running one is read afresh each time.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections import OrderedDict
from typing import Any

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from episodes import contract
from episodes.client.histories.transcript import load_transcript
from episodes.errors import EpisodesError
from episodes.types.io import EpisodeProgress
from episodes.viewer.visibility import row

# List views: strings cut to this many characters, lists to their first and last items.
MAX_STR = 2_000
MAX_ITEMS = 200
# A part (a message, a reply, one event) larger than this once clipped is clipped harder.
PART_BUDGET = 64 * 1024
TIGHT_STR, TIGHT_ITEMS = 300, 24
CACHED_EPISODES = 6
STDERR_MARK = "\n--- harness stderr (tail) ---\n"


class NotFound(EpisodesError):
    """No such episode, turn or part."""


def clip(value: Any, max_str: int | None = MAX_STR, max_items: int | None = MAX_ITEMS) -> Any:
    """`value` made JSON-safe and, with limits, smaller: long strings end in `…`, long
    lists keep their ends around a `"… N more …"` string."""
    if isinstance(value, str):
        if max_str is not None and len(value) > max_str:
            return value[:max_str] + f"… [{len(value) - max_str:,} more characters]"
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {str(k): clip(v, max_str, max_items) for k, v in value.items()}
    if isinstance(value, list | tuple):
        if max_items is not None and len(value) > max_items:
            half = max_items // 2
            more = f"… {len(value) - 2 * half:,} more …"
            ends = [clip(v, max_str, max_items) for v in (*value[:half], *value[-half:])]
            return [*ends[:half], more, *ends[half:]]
        return [clip(v, max_str, max_items) for v in value]
    return value


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, default=str))


def clip_part(value: Any) -> tuple[Any, int | None]:
    """A part for a list view, and its full size in bytes when it was clipped."""
    full = clip(value, None, None)
    size = _size(full)
    if size <= PART_BUDGET:
        return full, None
    small = clip(value)
    if _size(small) > PART_BUDGET:
        small = clip(value, TIGHT_STR, TIGHT_ITEMS)
    return small, size


def turn_view(t: dict[str, Any]) -> dict[str, Any]:
    """One TurnResult dict (or a placeholder) as the episode page shows it."""
    rec = t.get("record") or {}
    out: dict[str, Any] = {"turn": rec.get("turn"), "clipped": {}}
    if t.get("undecodable"):
        out["undecodable"] = True
        return out
    for key in ("message", "reply", "error"):
        out[key], size = clip_part(rec.get(key))
        if size is not None:
            out["clipped"][key] = size
    out["error_type"] = rec.get("error_type")
    out["duration_ms"] = clip(rec.get("duration_ms"))
    out["events"] = []
    for i, ev in enumerate(rec.get("events") or []):
        small, size = clip_part(ev)
        out["events"].append(small)
        if size is not None:
            out["clipped"][f"events.{i}"] = size
    obs = t.get("observation")
    out["observation"], size = clip_part(obs)
    if size is not None:
        out["clipped"]["observation"] = size
    out["termination"] = t.get("termination")
    return out


def part_of(t: dict[str, Any], part: str) -> Any:
    """One part of a turn, whole: `message`, `reply`, `error`, `observation`, `events.<i>`."""
    rec = t.get("record") or {}
    if part == "observation":
        return t.get("observation")
    if part in ("message", "reply", "error"):
        return rec.get(part)
    kind, _, index = part.partition(".")
    events = rec.get("events") or []
    if kind == "events" and index.isdigit() and int(index) < len(events):
        return events[int(index)]
    raise NotFound(f"turn {rec.get('turn')} has no part {part!r}")


def split_error(error: str | None) -> dict[str, str | None]:
    """A harness failure's message and the stderr tail its text carries."""
    if not error:
        return {"message": None, "stderr": None}
    message, _, stderr = error.partition(STDERR_MARK)
    return {"message": message, "stderr": stderr or None}


class Episodes:
    """The viewer's reads of single episodes, with the cache of closed transcripts."""

    def __init__(self, client: Client, cached: int = CACHED_EPISODES) -> None:
        self.client = client
        self._cache: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._loading: dict[str, asyncio.Task[dict[str, Any]]] = {}
        self._cached = cached

    async def describe(self, workflow_id: str) -> dict[str, Any]:
        return (await self._describe(workflow_id))[0]

    async def _describe(self, workflow_id: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """The episode's row; for a group's member also its transcript, read with the
        row from the group's history (a member's page and poll read it once)."""
        try:
            desc = await self.client.get_workflow_handle(workflow_id).describe()
        except RPCError as e:
            if e.status == RPCStatusCode.NOT_FOUND:
                from episodes.viewer.members import member_view

                member = await member_view(self.client, workflow_id)  # a group's member?
                if member is not None:
                    return member
                raise NotFound(f"no episode {workflow_id!r}") from None
            raise
        return row(desc), None

    async def _read(self, workflow_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """The episode's row and its transcript."""
        meta, data = await self._describe(workflow_id)
        if data is None:
            data = await self.transcript(workflow_id, closed=meta["status"] != "running")
        return meta, data

    async def transcript(self, workflow_id: str, closed: bool) -> dict[str, Any]:
        """The decoded transcript (tolerantly); closed ones from the cache."""
        if not closed:
            self._cache.pop(workflow_id, None)
            return await load_transcript(self.client, workflow_id, tolerant=True)
        if workflow_id in self._cache:
            self._cache.move_to_end(workflow_id)
            return self._cache[workflow_id]
        # Two page requests at once share one history read.
        task = self._loading.get(workflow_id)
        if task is None:
            task = asyncio.ensure_future(load_transcript(self.client, workflow_id, tolerant=True))
            self._loading[workflow_id] = task
        try:
            data = await asyncio.shield(task)
        finally:
            if task.done():
                self._loading.pop(workflow_id, None)
        self._cache[workflow_id] = data
        while len(self._cache) > self._cached:
            self._cache.popitem(last=False)
        return data

    async def page(self, workflow_id: str, offset: int = 0, limit: int = 50) -> dict[str, Any]:
        """The episode's header and turns [offset, offset+limit), clipped."""
        meta, data = await self._read(workflow_id)
        turns = data["turns"]
        offset = max(0, offset)
        result = data.get("result")
        first, first_size = clip_part((data.get("session") or {}).get("first_message"))
        out: dict[str, Any] = {
            "episode": meta,
            "task": clip(data.get("task")),
            "first_message": first,
            "first_message_clipped": first_size,
            "session": _session(data.get("session")),
            "restarts": clip(data.get("restarts") or []),
            "undecodable": data.get("undecodable") or [],
            "result": None,
            "total_turns": len(turns),
            "offset": offset,
            "turns": [turn_view(t) for t in turns[offset : offset + max(1, limit)]],
        }
        if result:
            out["result"] = {
                **clip({k: v for k, v in result.items() if k not in ("error", "score_details")}),
                "score_details": clip_part(result.get("score_details"))[0],
                "error": split_error(result.get("error")),
            }
        return out

    async def part(self, workflow_id: str, turn: int, part: str) -> Any:
        """One part of one turn, whole (the list views' "load full")."""
        _, data = await self._read(workflow_id)
        if part == "first_message":
            return clip((data.get("session") or {}).get("first_message"), None, None)
        turns = data["turns"]
        if not 0 <= turn < len(turns):
            raise NotFound(f"episode {workflow_id!r} has no turn {turn}")
        return clip(part_of(turns[turn], part), None, None)

    async def progress(self, workflow_id: str, since: int, limit: int = 50) -> dict[str, Any]:
        """What a running episode did from turn `since` on (the `progress` query); the
        turns it no longer holds in its answer (more than its `last`) come from history."""
        handle = self.client.get_workflow_handle(workflow_id)
        meta, member = await self._describe(workflow_id)
        if meta["status"] != "running":
            return {"episode": meta, "closed": True, "turns": [], "since": since}
        if "group" in meta:  # a group's member: its group's latest heartbeat
            from episodes.viewer.members import member_progress

            out = await member_progress(self.client, meta, since, limit, member)
            return {**out, "turns": [turn_view(t) for t in out["turns"]]}
        try:
            p: EpisodeProgress = await handle.query(
                contract.PROGRESS, args=[since, limit], result_type=EpisodeProgress
            )
        except Exception as e:  # no worker answers, or it just closed: try again later
            return {
                "episode": meta,
                "closed": False,
                "turns": [],
                "since": since,
                "error": (str(e) or type(e).__name__).splitlines()[0],
            }
        turns = [{"record": t.model_dump(mode="json")} for t in p.turns if t.turn >= since]
        if p.first_turn > since:  # a gap the query's bound left: fill it from history
            data = await load_transcript(
                self.client, workflow_id, max_turns=p.first_turn, tolerant=True
            )
            turns = data["turns"][since : since + limit]
        turns = turns[:limit]
        return {
            "episode": meta,
            "closed": False,
            "since": since,
            "status": p.status,
            "turns_done": p.turns_done,
            "max_turns": p.max_turns,
            "restarts": p.restarts,
            "turns": [turn_view(t) for t in turns],
        }


def _session(ref: dict[str, Any] | None) -> dict[str, Any] | None:
    if not ref:
        return None
    return {k: clip(v) for k, v in ref.items() if k != "first_message"}
