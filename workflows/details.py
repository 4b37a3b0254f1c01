"""The markdown an episode shows as its current details in the Temporal UI."""

from __future__ import annotations

import json
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from episodes.types.results import TurnRecord

_SNIPPET = 300


def snippet(value: Any, limit: int = _SNIPPET) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


def episode_details(
    status: str,
    max_turns: int,
    turns: list[TurnRecord],
    termination: str | None,
    turns_done: int | None = None,
) -> str:
    """`turns` may be the last few only (a long episode's run): `turns_done` counts all."""
    done = len(turns) if turns_done is None else turns_done
    lines = [f"**{status}** · turn {done}/{max_turns}"]
    if termination:
        lines[0] += f" · `{termination}`"
    if turns:
        last = turns[-1]
        lines.append(f"\n**last turn ({last.turn})**, {last.duration_ms:.0f} ms")
        lines.append(f"- message: `{snippet(last.message)}`")
        if last.error:
            lines.append(f"- error ({last.error_type}): `{snippet(last.error)}`")
        else:
            lines.append(f"- reply: `{snippet(last.reply)}`")
        if last.events:
            lines.append(f"- events: {len(last.events)}")
    return "\n".join(lines)
