"""Temporal Schedules that start an EvalBatchWorkflow on a cron or an interval.

The schedule id is its NAME. Each scheduled run is a batch workflow `schedule.NAME-<time>`
(Temporal appends the scheduled time), whose batch id is that workflow id, so every
run gets its own episode ids. The batch and its episodes carry the search attribute
`EpisodeSchedule = 'NAME'`.

The spec, with its dataset, is read when the schedule is created: the schedule holds
the tasks inline. Re-create the schedule to pick up a changed spec or dataset.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from pydantic import Field
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleHandle,
    ScheduleIntervalSpec,
    ScheduleListActionStartWorkflow,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
)
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.service import RPCError, RPCStatusCode

from episodes import search_attributes as sa
from episodes.client.batch.priority import with_priority
from episodes.client.batch.server import batch_input, total_episodes
from episodes.contract import BATCH_WORKFLOW
from episodes.errors import ScheduleError
from episodes.evals.manifest import MEMO_KEY, manifest_of
from episodes.types.base import Model
from episodes.types.spec import EpisodeSpec

OVERLAP: dict[str, ScheduleOverlapPolicy] = {
    "skip": ScheduleOverlapPolicy.SKIP,
    "buffer-one": ScheduleOverlapPolicy.BUFFER_ONE,
    "buffer-all": ScheduleOverlapPolicy.BUFFER_ALL,
    "cancel-other": ScheduleOverlapPolicy.CANCEL_OTHER,
    "terminate-other": ScheduleOverlapPolicy.TERMINATE_OTHER,
    "allow-all": ScheduleOverlapPolicy.ALLOW_ALL,
}
_OVERLAP_NAMES = {v: k for k, v in OVERLAP.items()}
_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_DURATION = re.compile(r"(\d+)([dhms])")


def parse_every(text: str) -> timedelta:
    """'6h', '30m', '1h30m', '90s', '1d' -> a timedelta (at least one second)."""
    t = text.strip().lower()
    if not t or _DURATION.sub("", t):
        raise ScheduleError(f"--every {text!r}: not a duration like 6h, 30m, 1h30m, 90s or 1d")
    seconds = sum(int(n) * _UNITS[u] for n, u in _DURATION.findall(t))
    if seconds < 1:
        raise ScheduleError(f"--every {text!r}: must be at least 1s")
    return timedelta(seconds=seconds)


def schedule_workflow_id(name: str) -> str:
    return f"schedule.{name}"


class RecentRun(Model):
    workflow_id: str
    scheduled_at: datetime
    started_at: datetime


class ScheduleSummary(Model):
    """One schedule as `list` and `describe` show it."""

    name: str
    spec_name: str | None = None
    when: str | None = None
    episodes: int | None = None
    task_queue: str | None = None
    paused: bool = False
    note: str | None = None
    overlap: str | None = None  # describe only
    actions: int | None = None  # describe only: runs started so far
    skipped_overlap: int | None = None  # describe only
    running: list[str] = Field(default_factory=list)
    recent: list[RecentRun] = Field(default_factory=list)
    next_runs: list[datetime] = Field(default_factory=list)


async def create_schedule(
    client: Client,
    name: str,
    spec: EpisodeSpec,
    *,
    task_queue: str,
    cron: str | None = None,
    every: str | timedelta | None = None,
    overlap: str = "skip",
    concurrency: int | None = None,
    pass_threshold: float = 1.0,
    priority_options: dict[str, Any] | None = None,
) -> ScheduleHandle:
    """`priority_options`: `episodes.client.batch.priority.with_priority`'s keywords (priority, fairness, budget),
    over the spec's; each run is a batch with them."""
    if (cron is None) == (every is None):
        raise ScheduleError("give exactly one of --cron EXPR or --every DURATION")
    if overlap not in OVERLAP:
        raise ScheduleError(f"--overlap {overlap!r}: choose one of {', '.join(OVERLAP)}")
    if not name or any(c.isspace() for c in name) or "'" in name or '"' in name:
        raise ScheduleError(f"schedule name {name!r}: use no spaces or quotes")
    spec = with_priority(spec, **(priority_options or {}))
    inp = batch_input(spec, schedule=name, concurrency=concurrency, pass_threshold=pass_threshold)
    if cron is not None:
        when, sched_spec = f"cron {cron}", ScheduleSpec(cron_expressions=[cron])
    else:
        delta = every if isinstance(every, timedelta) else parse_every(str(every))
        when = f"every {every}" if isinstance(every, str) else f"every {delta}"
        sched_spec = ScheduleSpec(intervals=[ScheduleIntervalSpec(every=delta)])
    action = ScheduleActionStartWorkflow(
        BATCH_WORKFLOW,
        inp,
        id=schedule_workflow_id(name),
        task_queue=task_queue,
        typed_search_attributes=sa.batch_search_attributes(inp.spec, None, inp.schedule),
        priority=sa.task_priority(inp.spec),
        static_summary=f"schedule {name} · {spec.name} · {total_episodes(inp)} episodes",
        # Each run's manifest (`episodes.evals.manifest`): `episodes compare` reads it.
        memo={MEMO_KEY: manifest_of(inp.spec)},
    )
    try:
        return await client.create_schedule(
            name,
            Schedule(
                action=action,
                spec=sched_spec,
                policy=SchedulePolicy(overlap=OVERLAP[overlap]),
                state=ScheduleState(note=f"created for spec {spec.name}"),
            ),
            memo={
                "spec": spec.name,
                "when": when,
                "episodes": total_episodes(inp),
                "task_queue": task_queue,
            },
            search_attributes=TypedSearchAttributes(
                [
                    SearchAttributePair(sa.SCHEDULE, name),
                    SearchAttributePair(sa.SPEC, spec.name),
                ]
            ),
        )
    except ScheduleAlreadyRunningError:
        raise ScheduleError(f"schedule {name!r} already exists; delete it first") from None
    except RPCError as e:
        raise ScheduleError(f"schedule {name!r}: {e.message}") from None


async def list_schedules(client: Client) -> list[ScheduleSummary]:
    """Schedules that start batches (others in the namespace are left out), by name."""
    out = []
    async for entry in await client.list_schedules():
        action = entry.schedule.action if entry.schedule else None
        if not isinstance(action, ScheduleListActionStartWorkflow):
            continue
        if action.workflow != BATCH_WORKFLOW:
            continue
        memo = await entry.memo()
        info = entry.info
        out.append(
            ScheduleSummary(
                name=entry.id,
                **_from_memo(memo),
                paused=bool(entry.schedule and entry.schedule.state.paused),
                note=(entry.schedule.state.note or None) if entry.schedule else None,
                recent=[_recent(r) for r in info.recent_actions] if info else [],
                next_runs=list(info.next_action_times) if info else [],
            )
        )
    return sorted(out, key=lambda s: s.name)


async def describe_schedule(client: Client, name: str) -> ScheduleSummary:
    desc = await _call(name, client.get_schedule_handle(name).describe())
    memo = await desc.memo()
    s, info = desc.schedule, desc.info
    return ScheduleSummary(
        name=name,
        **_from_memo(memo),
        paused=s.state.paused,
        note=s.state.note or None,
        overlap=_OVERLAP_NAMES.get(s.policy.overlap, str(s.policy.overlap)),
        actions=info.num_actions,
        skipped_overlap=info.num_actions_skipped_overlap,
        running=[getattr(a, "workflow_id", str(a)) for a in info.running_actions],
        recent=[_recent(r) for r in info.recent_actions],
        next_runs=list(info.next_action_times),
    )


async def pause_schedule(client: Client, name: str, note: str | None = None) -> None:
    await _call(name, client.get_schedule_handle(name).pause(note=note or "paused"))


async def unpause_schedule(client: Client, name: str, note: str | None = None) -> None:
    await _call(name, client.get_schedule_handle(name).unpause(note=note or "unpaused"))


async def trigger_schedule(client: Client, name: str, overlap: str | None = None) -> None:
    """Start a run now; `overlap` overrides the schedule's policy for this run."""
    if overlap is not None and overlap not in OVERLAP:
        raise ScheduleError(f"--overlap {overlap!r}: choose one of {', '.join(OVERLAP)}")
    policy = OVERLAP[overlap] if overlap else None
    await _call(name, client.get_schedule_handle(name).trigger(overlap=policy))


async def delete_schedule(client: Client, name: str) -> None:
    """Delete the schedule; batches it started keep running and stay findable."""
    await _call(name, client.get_schedule_handle(name).delete())


async def _call(name: str, coro: Any) -> Any:
    try:
        return await coro
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            raise ScheduleError(f"no schedule named {name!r}") from None
        raise ScheduleError(f"schedule {name!r}: {e.message}") from None


def _from_memo(memo: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "spec_name": memo.get("spec"),
        "when": memo.get("when"),
        "episodes": memo.get("episodes"),
        "task_queue": memo.get("task_queue"),
    }


def _recent(r: Any) -> RecentRun:
    return RecentRun(
        workflow_id=getattr(r.action, "workflow_id", str(r.action)),
        scheduled_at=r.scheduled_at,
        started_at=r.started_at,
    )
