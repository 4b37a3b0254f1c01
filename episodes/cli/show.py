"""`episodes show ID`: a transcript rebuilt from the workflow's history (no worker needed)."""

from __future__ import annotations

import contextlib
import json
from datetime import timedelta
from typing import Any

from rich.markup import escape
from rich.panel import Panel
from temporalio.client import Client
from temporalio.converter import DataConverter

from episodes.cli.common import console
from episodes.cli.embedded import reading_client
from episodes.client.config import Config
from episodes.client.histories.transcript import load_transcript
from episodes.payloads.settings import configured_data_converter, existing_dev_storage
from episodes.words import plural


def _fmt(value: Any) -> str:
    """A value as a reader wants it: a string as its text; a dict or a list key by key
    (item by item), each value as compact JSON, except a string holding lines (code, a
    diff), shown as its lines under `key |`, never as one line of `\\n` escapes."""
    if isinstance(value, str):
        return value
    if isinstance(value, (dict, list)) and value:
        return "\n".join(_lines(value, ""))
    return json.dumps(value, ensure_ascii=False)


def _lines(value: dict[Any, Any] | list[Any], pad: str) -> list[str]:
    items = (
        [(f"{k}:", v) for k, v in value.items()]
        if isinstance(value, dict)
        else [("-", v) for v in value]
    )
    out = []
    for label, v in items:
        if isinstance(v, str) and "\n" in v:
            out.append(f"{pad}{label} |")
            out.extend(f"{pad}  {line}" for line in v.split("\n"))
        elif isinstance(v, (dict, list)) and v and _has_lines(v):
            inner = _lines(v, pad + "  ")
            if label == "-":  # a list's item starts on the dash's line
                inner[0] = f"{pad}- {inner[0][len(pad) + 2 :]}"
                out.extend(inner)
            else:
                out.append(f"{pad}{label}")
                out.extend(inner)
        else:
            out.append(f"{pad}{label} {json.dumps(v, ensure_ascii=False)}")
    return out


def _has_lines(value: Any) -> bool:
    if isinstance(value, str):
        return "\n" in value
    if isinstance(value, dict):
        return any(_has_lines(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_lines(v) for v in value)
    return False


def _fmt_event(ev: Any) -> str:
    """One line for the calls the session recorded; other events as they are."""
    kind = ev.get("kind") if isinstance(ev, dict) else None
    if kind == "tool_call":
        args = json.dumps(ev.get("arguments"), ensure_ascii=False)
        outcome = (
            f"[red]error[/] {escape(str(ev['error']))}"
            if "error" in ev
            else escape(_short(ev.get("result")))
        )
        return f"[cyan]tool[/] {ev.get('name')}({escape(args)}) -> {outcome} [dim]{ev.get('ms', 0):.1f} ms[/]"
    if kind == "model_call":
        usage = ev.get("usage") or {}
        choice = ((ev.get("response") or {}).get("choices") or [{}])[0]
        msg = choice.get("message") or {}
        calls = [c.get("function", {}).get("name") for c in msg.get("tool_calls") or []]
        said = f"tool calls {', '.join(map(str, calls))}" if calls else _short(msg.get("content"))
        status = f" [red]HTTP {ev['status']}[/]" if ev.get("status", 200) != 200 else ""
        model = ev.get("request", {}).get("model")
        failed = _call_error(ev)
        if failed is not None:  # no tokens to count: the recorded cause
            return f"[magenta]model[/] {model}{status}: {escape(failed)} [dim]{ev.get('ms', 0):.1f} ms[/]"
        return (
            f"[magenta]model[/] {model}{status}: "
            f"{usage.get('prompt_tokens', '?')}+{usage.get('completion_tokens', '?')} tokens, "
            f"{escape(said)} [dim]{ev.get('ms', 0):.1f} ms[/]"
        )
    if _has_lines(ev):
        return f"[dim]event[/]\n{escape(_fmt(ev))}"
    return f"[dim]event[/] {escape(json.dumps(ev, ensure_ascii=False))}"


def _call_error(ev: dict[str, Any]) -> str | None:
    """Why a recorded model call failed (the proxy's cause, or the upstream's error
    body's message), or None for a call that answered."""
    response = ev.get("response")
    body = response.get("error") if isinstance(response, dict) else None
    message = body.get("message") if isinstance(body, dict) else None
    if ev.get("status", 200) == 200 and message is None:
        return None
    return str(message or ev.get("error") or "no answer")


def _short(value: Any, limit: int = 120) -> str:
    text = _fmt(value).replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def show_converter() -> DataConverter:
    """The configured converter; with no storage set and `.episodes/payloads/` present
    (what `episodes dev` writes), that directory, so its histories' references resolve.
    Reading only: `show` never stores anything."""
    return configured_data_converter(default_storage=existing_dev_storage())


async def show_episode(workflow_id: str, *, cfg: Config, as_json: bool) -> None:
    async with contextlib.AsyncExitStack() as stack:
        client = await reading_client(stack, cfg, data_converter=show_converter())
        data = await load_transcript(client, workflow_id)
        if data["result"] is None:
            data["progress"] = await _progress(client, workflow_id)
    if as_json:
        print(json.dumps(data, indent=2, ensure_ascii=False))
        return
    print_transcript(data)


def print_transcript(data: dict[str, Any]) -> None:
    """`load_transcript`'s data, turn by turn, for a terminal; every value as text."""
    turns = data["turns"]
    first = data["session"]["first_message"] if data["session"] else None
    # Turn 0 sends the first message (unless a trainer wrote its own): shown there once.
    if data["session"] and not (
        turns and turns[0]["record"]["turn"] == 0 and turns[0]["record"]["message"] == first
    ):
        console.print(Panel(escape(_fmt(first)), title="first message"))
    for t in turns:
        rec = t["record"]
        body = [f"[bold]message[/]\n{escape(_fmt(rec['message']))}"]
        for ev in rec["events"]:
            body.append(_fmt_event(ev))
        if rec["error"]:
            body.append(f"[red]{rec['error_type']}[/]\n{escape(rec['error'])}")
        else:
            body.append(f"[bold]reply[/]\n{escape(_fmt(rec['reply']))}")
        obs = t["observation"]
        if obs.get("reward") is not None or obs.get("done"):
            body.append(f"[dim]done={obs['done']} reward={obs.get('reward')}[/]")
        console.print(
            Panel("\n".join(body), title=f"turn {rec['turn']} · {rec['duration_ms']:.1f} ms")
        )
    r = data["result"]
    if r:
        if r.get("score_details"):
            console.print(Panel(escape(_fmt(r["score_details"])), title="score details"))
        console.print(
            f"[bold]{r['termination']}[/] after {plural(r['turns'], 'turn')}, reward {r['reward']}, "
            f"{r['duration_s']:.2f} s" + (f"\n[red]{escape(r['error'])}[/]" if r["error"] else "")
        )
    else:
        console.print(running_line(data["workflow_id"], data.get("progress")), highlight=False)


async def _progress(client: Client, workflow_id: str) -> dict[str, Any] | None:
    """A running episode's `progress` (its status), or None when no worker answers."""
    from episodes import contract
    from episodes.types.io import EpisodeProgress

    try:
        progress = await client.get_workflow_handle(workflow_id).query(
            contract.PROGRESS,
            args=[None, 0],
            result_type=EpisodeProgress,
            rpc_timeout=timedelta(seconds=10),
        )
    except Exception:
        return None
    return {
        "status": progress.status,
        "turns_done": progress.turns_done,
        "max_turns": progress.max_turns,
        "park_asked": progress.park_asked,
    }


def running_line(workflow_id: str, progress: dict[str, Any] | None) -> str:
    """What `show` says of an episode that has no result yet: parked, or where it is."""
    if progress is None:
        return "[yellow]still running[/] (no worker answered for its status)"
    turn = progress["turns_done"]
    if progress["status"] == "parked":
        return (
            f"[yellow]parked at turn {turn}[/]: `episodes resume {workflow_id}` goes on "
            "(it holds no box)"
        )
    asked = "; parks at its next turn boundary" if progress["park_asked"] else ""
    return (
        f"[yellow]still running[/] ({progress['status']}, turn {turn} of "
        f"{progress['max_turns']}{asked})"
    )
