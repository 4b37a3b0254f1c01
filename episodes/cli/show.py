"""`episodes show ID`: a transcript rebuilt from the workflow's history (no worker needed)."""

from __future__ import annotations

import json
from typing import Any

from rich.panel import Panel

from episodes.cli.common import console
from episodes.client.connect import connect
from episodes.client.history import load_transcript

__all__ = ["load_transcript", "show_episode"]


def _fmt(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, indent=1, ensure_ascii=False)


async def show_episode(workflow_id: str, *, address: str, namespace: str, as_json: bool) -> None:
    client = await connect(address, namespace=namespace)
    data = await load_transcript(client, workflow_id)
    if as_json:
        print(json.dumps(data, indent=2, ensure_ascii=False))
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
