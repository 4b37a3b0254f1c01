"""The `restore` activity heartbeats from its start (issue 19): loading a long history
and opening the new box can take longer than the heartbeat timeout."""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio.testing import ActivityEnvironment

import episodes.client.histories.transcript
from activities.session import SessionActivities
from episodes.session.registry import SessionRegistry
from episodes.types.io import RestoreInput
from tests.support.helpers import spec


async def test_restore_heartbeats_while_it_loads_the_history(monkeypatch) -> None:
    beat = asyncio.Event()

    async def slow_history(client: Any, workflow_id: str, turns: int) -> list:
        await asyncio.wait_for(beat.wait(), 20)  # before: no beat came until it returned
        return []

    monkeypatch.setattr(episodes.client.histories.transcript, "recorded_turns", slow_history)
    acts = SessionActivities(SessionRegistry(), session_queue="q", worker_id="w")
    env = ActivityEnvironment(client=object())  # type: ignore[arg-type]
    env.on_heartbeat = lambda *details: beat.set()
    s = spec(name="restore-beat")
    inp = RestoreInput(
        spec=s, task=s.tasks[0], sample=0, workflow_id="wf", run_id="r", turns=0, restart=1
    )
    restored = await env.run(acts.restore, inp)
    assert restored.turns_replayed == 0 and beat.is_set()
    session = acts.registry.pop(restored.session.session_id)
    assert session is not None
    await session.close()
