"""A worker SIGKILLed mid-episode with `on_worker_lost: restart`: the LLM harness on
the new worker is brought back by an exact replay (no model call reaches the upstream
for the recorded turns, no divergence), then goes on live (see test_restart.py)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from episodes.client.connect import connect
from episodes.model.scripted.server import ScriptedUpstream
from tests.support.helpers import spec
from tests.support.notebook import NOTEBOOK, sampling_policy
from tests.workflows.test_restart import _kill_holder, _start, _worker

pytestmark = pytest.mark.timeout(240)


async def test_a_restarted_llm_agent_replays_exactly_and_goes_on(dev_server) -> None:
    queue = f"replay-{uuid.uuid4().hex[:6]}"
    procs = [_worker(dev_server.address, queue) for _ in range(2)]
    client = await connect(dev_server.address)
    try:
        async with ScriptedUpstream(policy=sampling_policy) as upstream:
            s = spec(
                name=f"xr-{uuid.uuid4().hex[:6]}",
                env=NOTEBOOK,
                env_args={"delay_s": 0.3},
                max_turns=10,
                turn_timeout_s=30.0,
                on_worker_lost="restart",
                worker_lost_timeout_s=3,
                harness={
                    "command": ["{python}", "-m", "episodes.harness.reference.llm"],
                    "ready_timeout_s": 30.0,
                },
                model={"base_url": upstream.base_url, "model": "scripted", "token_data": True},
            )
            handle = await _start(client, queue, s, s.name, 100)
            await _kill_holder(handle, procs, 3)
            result = await asyncio.wait_for(handle.result(), 180)
            sessions: dict[str, int] = {}
            for r in upstream.chat_requests:
                sid = r["headers"].get("X-Session-ID", "")
                sessions[sid] = sessions.get(sid, 0) + 1
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert (result.termination, result.restarts) == ("max_turns", 1), result.error
    assert result.turns_replayed >= 3
    assert result.replay_divergences == 0
    # Two sessions called the model: the lost one, and the restored one, which sent
    # nothing for the replayed turns (a note and a reply per live turn after them).
    assert len(sessions) == 2, sessions
    restored = sessions[list(sessions)[-1]]
    assert restored == 2 * (10 - result.turns_replayed)
