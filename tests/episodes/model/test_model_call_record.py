"""The record of model calls grows with the conversation, not its square (issue 22).

A real dev server and worker, a harness keeping one conversation across turns (and
compacting it once), the scripted upstream as a real HTTP server. The history keeps
each call's new messages with a reference to the call it extends; read back through
Temporal, every call's `messages` equal what the harness sent.
"""

from __future__ import annotations

import sys
import uuid

import pytest

from episodes.client import EpisodesClient
from episodes.model.scripted.server import ScriptedUpstream, echo_policy
from episodes.types.spec import parse_spec
from tests.conftest import ROOT

pytestmark = pytest.mark.timeout(180)

CHATTY = [sys.executable, str(ROOT / "tests" / "support" / "harnesses" / "chatty_harness.py")]


def _spec(base_url: str, turns: int, **env: str) -> dict:
    return {
        "name": f"chatty-{uuid.uuid4().hex[:6]}",
        "env": "script",
        "tasks": [{"id": "t", "data": {"messages": [f"m{i}" for i in range(turns)]}}],
        "max_turns": turns,
        "harness": {"command": CHATTY, "env": env},
        "model": {"base_url": base_url, "model": "scripted"},
    }


async def test_each_call_records_its_new_messages_and_reads_back_whole(client, worker):
    episodes = EpisodesClient(client, task_queue="episodes-test")
    async with ScriptedUpstream(policy=echo_policy) as upstream:
        spec = parse_spec(_spec(upstream.base_url, 5, CHATTY_CALLS="3", CHATTY_COMPACT_AT="3"))
        result = await episodes.run_episode(spec, spec.tasks[0])
        sent = [r["body"]["messages"] for r in upstream.chat_requests]
    assert result.termination == "env_done", result.error
    assert len(sent) == 15
    transcript = await episodes.transcript(result.workflow_id)
    calls = transcript.model_calls()
    # Read back through Temporal: every call's whole conversation, as the harness sent it.
    assert [c.messages for c in calls] == sent
    assert all(c.messages_complete for c in calls)
    assert len({c.id for c in calls}) == 15
    # Recorded: the first call whole, later ones only what they added (a user message,
    # and the answer before it), whatever the length of the conversation.
    raw = transcript.events("model_call")
    assert "extends" not in raw[0] and len(raw[0]["request"]["messages"]) == 2
    for event in raw[1:9] + raw[10:]:
        assert len(event["request"]["messages"]) == 2, event["request"]["messages"]
        assert event["extends"]["id"] == raw[raw.index(event) - 1]["id"]
    # The compacted conversation extends only the system message of the one before.
    compacted = raw[9]
    assert compacted["extends"]["messages"] == 1
    assert len(compacted["request"]["messages"]) == 2  # the summary and the new message
