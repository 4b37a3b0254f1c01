"""Episodes and batches from Temporal's visibility: the search attributes, no history.

Listing reads only what the server indexed (`episodes.search_attributes` plus the
execution's status and times), so a 1,000-episode batch page costs one or two list
calls, never a history read. Visibility is eventually consistent: an episode that just
ended may show no termination for a moment (it reads as running until then).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus

from episodes import contract
from episodes import search_attributes as sa
from episodes.errors import EpisodesError
from episodes.viewer.stats import latest_attempts, side

# Every run of a continued episode is an execution; only the chain's latest is the episode.
EPISODES = (
    f'WorkflowType IN ("{contract.EPISODE_WORKFLOW}", "{contract.INTERACTIVE_WORKFLOW}")'
    ' AND ExecutionStatus != "ContinuedAsNew"'
)
# Most episodes one list call reads (the batch page's bound; a batch larger than this
# shows its first this-many with `truncated` set).
MAX_ROWS = 20_000
# What the index page scans for distinct batches: the latest episodes.
INDEX_SCAN = 5_000
_ID_TAIL = re.compile(r"\.s(\d+)(?:\.r(\d+))?(?:\.session)?$")
# Keyword values go inside double quotes in a visibility query: refuse what could end them.
_UNSAFE = re.compile(r'["\\\n\r]')
_CLOSED_WITHOUT_OUTCOME = {
    WorkflowExecutionStatus.FAILED: "workflow_failed",
    WorkflowExecutionStatus.TERMINATED: "terminated",
    WorkflowExecutionStatus.TIMED_OUT: "timed_out",
    WorkflowExecutionStatus.CANCELED: "cancelled",
}


class BadQuery(EpisodesError):
    """A search filter the viewer will not put into a visibility query."""


@dataclass
class Filters:
    """The index page's search: each set field narrows the visibility query."""

    batch: str | None = None
    env: str | None = None
    task: str | None = None
    termination: str | None = None
    reward_min: float | None = None
    reward_max: float | None = None
    since: str | None = None  # started at or after (RFC 3339 / ISO date)
    until: str | None = None  # started before
    running: bool | None = None

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> Filters:
        def num(name: str) -> float | None:
            raw = (params.get(name) or "").strip()
            if not raw:
                return None
            try:
                return float(raw)
            except ValueError:
                raise BadQuery(f"{name} must be a number, not {raw!r}") from None

        def text(name: str) -> str | None:
            return (params.get(name) or "").strip() or None

        running = text("status")
        return cls(
            batch=text("batch"),
            env=text("env"),
            task=text("task"),
            termination=text("termination"),
            reward_min=num("reward_min"),
            reward_max=num("reward_max"),
            since=_when(text("since"), "since"),
            until=_when(text("until"), "until"),
            running=None if running is None else running == "running",
        )

    def query(self) -> str:
        parts = [EPISODES]
        for key, value in (
            (sa.BATCH, self.batch),
            (sa.ENV, self.env),
            (sa.TASK, self.task),
            (sa.TERMINATION, self.termination),
        ):
            if value is not None:
                parts.append(f'{key.name} = "{_keyword(key.name, value)}"')
        if self.reward_min is not None:
            parts.append(f"{sa.REWARD.name} >= {self.reward_min!r}")
        if self.reward_max is not None:
            parts.append(f"{sa.REWARD.name} <= {self.reward_max!r}")
        if self.since:
            parts.append(f'StartTime >= "{self.since}"')
        if self.until:
            parts.append(f'StartTime < "{self.until}"')
        if self.running is not None:
            parts.append(f'ExecutionStatus {"=" if self.running else "!="} "Running"')
        return " AND ".join(parts)


def _keyword(field: str, value: str) -> str:
    if _UNSAFE.search(value):
        raise BadQuery(f"{field} may not contain quotes, backslashes or newlines")
    return value


def _when(value: str | None, name: str) -> str | None:
    if value is None:
        return None
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise BadQuery(f"{name} must be a date or time like 2025-01-31T12:00Z") from None
    if when.tzinfo is None:
        from datetime import UTC

        when = when.replace(tzinfo=UTC)
    return when.isoformat().replace("+00:00", "Z")


def row(wf: WorkflowExecution) -> dict[str, Any]:
    """One episode as the lists show it (JSON-ready)."""
    attrs = wf.typed_search_attributes
    m = _ID_TAIL.search(wf.id)
    termination = attrs.get(sa.TERMINATION)
    status = wf.status or WorkflowExecutionStatus.RUNNING
    if termination is None and status != WorkflowExecutionStatus.RUNNING:
        # Closed, but the outcome is not indexed: a failed workflow has none; a
        # completed one's may lag (visibility is eventually consistent).
        termination = _CLOSED_WITHOUT_OUTCOME.get(status)
    closed = wf.close_time
    return {
        "id": wf.id,
        "run_id": wf.run_id,
        "status": status.name.lower(),
        "batch": attrs.get(sa.BATCH),
        "task": attrs.get(sa.TASK),
        "env": attrs.get(sa.ENV),
        "spec": attrs.get(sa.SPEC),
        "sample": int(m.group(1)) if m else None,
        "attempt": int(m.group(2)) if m and m.group(2) else 0,
        "termination": termination,
        "side": side(termination),
        "reward": attrs.get(sa.REWARD),
        "turns": attrs.get(sa.TURNS),
        "priority": attrs.get(sa.PRIORITY),
        "fairness_key": attrs.get(sa.FAIRNESS),
        "start": wf.start_time.isoformat() if wf.start_time else None,
        "close": closed.isoformat() if closed else None,
        "duration_s": (closed - wf.start_time).total_seconds()
        if closed and wf.start_time
        else None,
    }


async def list_rows(client: Client, query: str, limit: int) -> tuple[list[dict[str, Any]], bool]:
    """Up to `limit` episodes matching `query`, newest first; whether more matched."""
    rows: list[dict[str, Any]] = []
    async for wf in client.list_workflows(query, limit=limit + 1, page_size=1000):
        rows.append(row(wf))
    return rows[:limit], len(rows) > limit


async def batches(client: Client, filters: Filters) -> dict[str, Any]:
    """Distinct batches among the latest episodes matching `filters`, with counts."""
    rows, truncated = await list_rows(client, filters.query(), INDEX_SCAN)
    scanned = len(rows)
    rows = latest_attempts(rows)  # a batch's figures count the final attempts only
    found: dict[str, dict[str, Any]] = {}
    for r in rows:
        name = r["batch"] or "(none)"
        b = found.setdefault(
            name,
            {
                "batch": name,
                "env": r["env"],
                "spec": r["spec"],
                "episodes": 0,
                "running": 0,
                "rewarded": 0,
                "reward_sum": 0.0,
                "first_start": r["start"],
                "last_start": r["start"],
            },
        )
        b["episodes"] += 1
        b["running"] += r["status"] == "running"
        if r["reward"] is not None:
            b["rewarded"] += 1
            b["reward_sum"] += r["reward"]
        if r["start"]:
            b["first_start"] = min(b["first_start"] or r["start"], r["start"])
            b["last_start"] = max(b["last_start"] or r["start"], r["start"])
    out = sorted(found.values(), key=lambda b: b["last_start"] or "", reverse=True)
    for b in out:
        b["mean_reward"] = b.pop("reward_sum") / b["rewarded"] if b["rewarded"] else None
    return {"query": filters.query(), "batches": out, "scanned": scanned, "truncated": truncated}
