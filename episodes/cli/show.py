"""`episodes show ID`: a transcript rebuilt from the workflow's history (no worker needed)."""

from __future__ import annotations

import json
from typing import Any

from rich.panel import Panel
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from episodes.cli.common import console
from episodes.connect import connect
from episodes.errors import EpisodesError
from episodes.messages import SessionRef
from episodes.models import EpisodeResult, TurnResult


async def load_transcript(client: Client, workflow_id: str) -> dict[str, Any]:
    from temporalio.service import RPCError

    handle = client.get_workflow_handle(workflow_id)
    try:
        history = await handle.fetch_history()
    except RPCError as e:
        raise EpisodesError(f"no episode {workflow_id!r}: {e.message}") from None
    conv = client.data_converter
    scheduled: dict[int, str] = {}
    out: dict[str, Any] = {"workflow_id": workflow_id, "session": None, "turns": [], "result": None}
    for ev in history.events:
        if ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled[ev.event_id] = ev.activity_task_scheduled_event_attributes.activity_type.name
        elif ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            attrs = ev.activity_task_completed_event_attributes
            kind = scheduled.get(attrs.scheduled_event_id)
            payloads = list(attrs.result.payloads)
            if kind == "provision" and payloads:
                [ref] = await conv.decode(payloads, [SessionRef])
                out["session"] = ref.model_dump(mode="json")
            elif kind == "turn" and payloads:
                [res] = await conv.decode(payloads, [TurnResult])
                out["turns"].append(res.model_dump(mode="json"))
        elif ev.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
            payloads = list(ev.workflow_execution_completed_event_attributes.result.payloads)
            if payloads:
                [res] = await conv.decode(payloads, [EpisodeResult])
                out["result"] = res.model_dump(mode="json")
    return out


def _fmt(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, indent=1)


async def show_episode(workflow_id: str, *, address: str, namespace: str, as_json: bool) -> None:
    client = await connect(address, namespace=namespace)
    data = await load_transcript(client, workflow_id)
    if as_json:
        print(json.dumps(data, indent=2))
        return
    if data["session"]:
        console.print(Panel(_fmt(data["session"]["first_message"]), title="first message"))
    for t in data["turns"]:
        rec = t["record"]
        body = [f"[bold]message[/]\n{_fmt(rec['message'])}"]
        for ev in rec["events"]:
            body.append(f"[dim]event[/] {_fmt(ev)}")
        if rec["error"]:
            body.append(f"[red]{rec['error_type']}[/]\n{rec['error']}")
        else:
            body.append(f"[bold]reply[/]\n{_fmt(rec['reply'])}")
        obs = t["observation"]
        if obs.get("reward") is not None or obs.get("done"):
            body.append(f"[dim]done={obs['done']} reward={obs.get('reward')}[/]")
        console.print(
            Panel("\n".join(body), title=f"turn {rec['turn']} · {rec['duration_ms']:.1f} ms")
        )
    r = data["result"]
    if r:
        console.print(
            f"[bold]{r['termination']}[/] after {r['turns']} turns, reward {r['reward']}, "
            f"{r['duration_s']:.2f} s" + (f"\n[red]{r['error']}[/]" if r["error"] else "")
        )
    else:
        console.print("[yellow]still running[/]")
