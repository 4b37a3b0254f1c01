"""The viewer's page of a group member (`episodes.types.group`): its group workflow's
row, named and scored as the member, and its turns from the group's record; and a
batch's rows with its group workflows' members among them (`batch_rows`). Built on
`episodes.viewer.visibility`'s rows, which know nothing of groups."""

from __future__ import annotations

from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from episodes.client.group.history import group_members, load_member
from episodes.types.group import GroupResult, parse_member
from episodes.types.results import EpisodeResult
from episodes.viewer.stats import side
from episodes.viewer.visibility import MAX_ROWS, Filters, list_rows, row


async def batch_rows(client: Client, batch: str) -> tuple[list[dict[str, Any]], bool]:
    """A batch's episodes as the lists show them, and whether more matched than a list
    call reads (`visibility.MAX_ROWS`)."""
    rows, truncated = await list_rows(client, Filters(batch=batch).query(), MAX_ROWS)
    # ... and the members of its group workflows (`execution: group`), by member id.
    return rows + await group_member_rows(client, batch), truncated


async def member_row(client: Client, workflow_id: str) -> dict[str, Any] | None:
    """The member's row, or None when the id names no member of an existing group."""
    found = await member_view(client, workflow_id)
    return found[0] if found else None


async def member_view(
    client: Client, workflow_id: str
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The member's row and its transcript (`load_member`'s dict: the group's history
    read once for both), or None when the id names no member of an existing group."""
    parsed = parse_member(workflow_id)
    if parsed is None:
        return None
    group, sample = parsed
    try:
        desc = await client.get_workflow_handle(group).describe()
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    data = await load_member(client, workflow_id, max_turns=None, tolerant=True)
    if data is None:
        return None
    out = {**row(desc), "id": workflow_id, "group": group, "sample": sample}
    result = data.get("result")
    if result:  # the member's own outcome, not the group's
        out.update(
            termination=result["termination"],
            side=side(result["termination"]),
            reward=result["reward"],
            turns=result["turns"],
        )
    else:
        out.update(termination=None, side=side(None), reward=None, turns=len(data["turns"]))
    return out, data


async def member_progress(
    client: Client,
    meta: dict[str, Any],
    since: int,
    limit: int,
    data: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A running member's turns from `since` on: its group's latest heartbeat (`data`:
    the member as `member_view` read it; None: read now)."""
    if data is None:
        data = await load_member(client, meta["id"], max_turns=None, tolerant=True)
    turns = (data or {}).get("turns", [])[since : since + limit]
    return {
        "episode": meta,
        "closed": False,
        "since": since,
        "status": "running",
        "turns_done": len((data or {}).get("turns", [])),
        "max_turns": None,
        "restarts": 0,
        "turns": turns,
    }


async def group_member_rows(client: Client, batch: str) -> list[dict[str, Any]]:
    """The batch page's rows of the members of its group workflows (`execution: group`):
    one a member of each task's final group attempt, its outcome from the group's result
    (running: the turns of the latest heartbeat)."""
    rows: list[dict[str, Any]] = []
    for wf in await group_members(client, batch):
        rows.append(row(wf) | {"id": wf.id})
    by_group: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        parsed = parse_member(r["id"])
        assert parsed is not None
        r["group"], r["sample"] = parsed
        by_group.setdefault(parsed[0], []).append(r)
    for group, members in by_group.items():
        results = await _group_results(client, group)
        for r in members:
            res = results.get(r["sample"])
            r.update(
                termination=res.termination if res else None,
                side=side(res.termination if res else None),
                reward=res.reward if res else None,
                turns=res.turns if res else None,
            )
    return rows


async def _group_results(client: Client, group: str) -> dict[int, EpisodeResult]:
    handle = client.get_workflow_handle(group, result_type=GroupResult)
    desc = await handle.describe()
    if desc.status != WorkflowExecutionStatus.COMPLETED:
        return {}
    return {r.sample: r for r in (await handle.result()).results}
