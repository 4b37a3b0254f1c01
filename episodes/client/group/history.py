"""A group member's transcript, read from its group workflow (`episodes.types.group`).

A member id (`<group workflow id>.s<sample>`) names no workflow of its own: its turns
are in the group's `run_group` activity result once the group ended, in the activity's
last heartbeat while it runs (the pending activity's details), or in the lost
attempt's timeout failure when its restarts ran out. `episodes.client.histories.transcript.
load_transcript` comes here for an id that names no workflow, so `episodes show`, the
viewer, `episodes export` and `EpisodesClient.transcript` take member ids as they take
episode ids, and get the same shape (`load_transcript`'s dict).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecution, WorkflowExecutionDescription

from episodes import contract
from episodes import search_attributes as sa
from episodes.errors import EpisodesError
from episodes.types.attempts import final_attempts
from episodes.types.group import (
    GroupInput,
    GroupProgress,
    GroupResult,
    member_id,
    parse_member,
)


async def load_member(
    client: Client, workflow_id: str, *, max_turns: int | None, tolerant: bool
) -> dict[str, Any] | None:
    """`load_transcript`'s dict for a member id; None when `workflow_id` is none (or
    its group does not exist). Raises RPCError as `load_transcript` expects."""
    from temporalio.service import RPCError, RPCStatusCode

    parsed = parse_member(workflow_id)
    if parsed is None:
        return None
    group, sample = parsed
    handle = client.get_workflow_handle(group)
    try:
        history = await handle.fetch_history()
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    out: dict[str, Any] = {
        "workflow_id": workflow_id,
        "group": group,
        "task": None,
        "session": None,
        "turns": [],
        "result": None,
    }
    if tolerant:
        out["undecodable"] = []
    progress: GroupProgress | None = None
    scheduled: dict[int, str] = {}
    conv = client.data_converter
    for ev in history.events:
        if ev.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            payloads = list(ev.workflow_execution_started_event_attributes.input.payloads)
            if payloads:
                [inp] = await conv.decode(payloads, [GroupInput])
                out["task"] = inp.task.model_dump(mode="json")
                if sample >= inp.size:
                    return None  # the group has no such member
        elif ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled[ev.event_id] = ev.activity_task_scheduled_event_attributes.activity_type.name
        elif ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            attrs = ev.activity_task_completed_event_attributes
            if scheduled.get(attrs.scheduled_event_id) == contract.RUN_GROUP:
                [progress] = await conv.decode(list(attrs.result.payloads), [GroupProgress])
        elif ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT:
            failure = ev.activity_task_timed_out_event_attributes.failure
            details = failure.timeout_failure_info.last_heartbeat_details.payloads
            if details:  # lost past its restarts: the last heartbeat's record
                [progress] = await conv.decode(list(details), [GroupProgress])
        elif ev.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
            payloads = list(ev.workflow_execution_completed_event_attributes.result.payloads)
            if payloads:
                [res] = await conv.decode(payloads, [GroupResult])
                mine = [r for r in res.results if r.sample == sample]
                out["result"] = mine[0].model_dump(mode="json") if mine else None
    if progress is None:  # running: the activity's latest heartbeat
        progress = await _heartbeat(client, await handle.describe())
    member = next((m for m in (progress.members if progress else []) if m.sample == sample), None)
    if member is None:
        return out  # not started yet (or cancelled before its first heartbeat)
    out["session"] = {"first_message": member.first_message, "group": group}
    turns = member.turns if max_turns is None else member.turns[:max_turns]
    out["turns"] = [t.model_dump(mode="json") for t in turns]
    if out["result"] is None and member.result is not None:
        out["result"] = member.result.model_dump(mode="json")
    return out


async def _heartbeat(client: Client, desc: WorkflowExecutionDescription) -> GroupProgress | None:
    for pending in desc.raw_description.pending_activities:
        if pending.activity_type.name == contract.RUN_GROUP and pending.heartbeat_details.payloads:
            payloads = list(pending.heartbeat_details.payloads)
            [progress] = await client.data_converter.decode(payloads, [GroupProgress])
            return progress
    return None


def groups_query(batch: str) -> str:
    """The visibility query of a batch's group workflows (quotes refused as
    `episodes.client.batch.server.episodes_query` refuses them)."""
    if "'" in batch or "\\" in batch:
        raise EpisodesError(f"batch id {batch!r}: quotes and backslashes are not allowed")
    return f"{sa.BATCH.name} = '{batch}' AND WorkflowType = '{contract.GROUP_WORKFLOW}'"


async def group_members(client: Client, batch: str) -> list[WorkflowExecution]:
    """A batch's group members, one entry each, named by member id (the group's
    execution otherwise: its status, its search attributes), sorted by id. Of a task's
    group attempts (`<id>.r<n>`) only the final one's members."""
    runs = [wf async for wf in client.list_workflows(groups_query(batch))]
    final = final_attempts(
        runs,
        workflow_id=lambda wf: wf.id,
        started=lambda wf: wf.start_time,
        member=lambda wf: wf.typed_search_attributes.get(sa.TASK) or wf.id,
    )
    out: list[WorkflowExecution] = []
    for wf in final:
        samples = 0
        async for ev in client.get_workflow_handle(wf.id, run_id=wf.run_id).fetch_history_events(
            page_size=1
        ):
            payloads = list(ev.workflow_execution_started_event_attributes.input.payloads)
            [inp] = await client.data_converter.decode(payloads, [GroupInput])
            samples = inp.size
            break
        out += [dataclasses.replace(wf, id=member_id(wf.id, s)) for s in range(samples)]
    return sorted(out, key=lambda wf: wf.id)
