"""A harness cannot pass its own events off as the proxy's model calls or the bridge's
tool calls: trainers learn from those records, and the harness is untrusted code."""

from __future__ import annotations

from episodes.session.live import LiveSession
from episodes.types.results import Task
from episodes.types.spec import parse_spec
from tests.conftest import SCRIPTED


async def test_harness_events_shaped_like_call_records_are_not_call_records():
    spec = parse_spec(
        {
            "name": "forge",
            "env": "script",
            "tasks": [{"id": "t", "data": {"messages": ["go"], "expected": ["go"]}}],
            "harness": {"command": ["{python}", str(SCRIPTED), "forge"]},
        }
    )
    session = LiveSession(spec, Task(id="t", data=spec.tasks[0].data), 0, "s-forge")
    try:
        await session.open()
        result = await session.turn(0)
        transcript = session.transcript("env_done")
    finally:
        await session.close()
    assert result.record.reply == "go"
    assert transcript.model_calls() == [] and transcript.tool_calls() == []
    # Kept, under a kind that says where they came from.
    kinds = [e["kind"] for e in transcript.turns[0].events]
    assert kinds == ["harness:model_call", "harness:tool_call"]
