"""`EpisodesClient.park` / `resume`: a parked episode holds no harness, then goes on.

Real parts: a dev server, a worker, the LLM harness as a real process and the scripted
upstream counting its requests: the resume replays the recorded turns exactly (no
model call for them), then the episode runs to its end.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid

import psutil
import pytest

from episodes.client import EpisodesClient
from episodes.model.scripted.server import ScriptedUpstream
from episodes.types.io import EpisodeProgress
from episodes.types.spec import parse_spec
from tests.support.helpers import wait_until
from tests.support.notebook import NOTEBOOK, sampling_policy

pytestmark = pytest.mark.timeout(240)


def _harnesses(marker: str) -> list[int]:
    found = []
    for p in psutil.Process(os.getpid()).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if marker in " ".join(p.cmdline()):
                found.append(p.pid)
    return found


async def test_a_parked_episode_holds_no_harness_and_resumes_exactly(client, worker) -> None:
    episodes = EpisodesClient(client, task_queue="episodes-test")
    async with ScriptedUpstream(policy=sampling_policy) as upstream:
        spec = parse_spec(
            {
                "name": f"park-{uuid.uuid4().hex[:6]}",
                "env": NOTEBOOK,
                "env_args": {"delay_s": 0.3},
                "tasks": [{"id": "t"}],
                "max_turns": 8,
                "harness": {"command": "{python} -m episodes.harness.reference.llm"},
                "model": {"base_url": upstream.base_url, "model": "scripted", "token_data": True},
            }
        )
        handle = await episodes.start_episode(spec, spec.tasks[0])

        async def progress() -> EpisodeProgress | None:
            with contextlib.suppress(Exception):
                return await handle.query("progress", result_type=EpisodeProgress)
            return None

        async def turned(n: int) -> bool:
            p = await progress()
            return p is not None and p.turns_done >= n

        assert await wait_until(lambda: turned(2), timeout=60)
        assert _harnesses("episodes.harness.reference.llm")
        await episodes.park(handle.id)

        async def parked() -> bool:
            p = await progress()
            return p is not None and p.status == "parked"

        assert await wait_until(parked, timeout=60)
        # Nothing runs while parked: the harness is gone, the upstream hears nothing.
        assert await wait_until(
            lambda: not _harnesses("episodes.harness.reference.llm"), timeout=30
        )
        p = await progress()
        assert p is not None and p.session is None
        at_park = p.turns_done
        sent = len(upstream.chat_requests)
        await asyncio.sleep(1.0)  # a parked episode stays parked (no condition to wait on)
        assert len(upstream.chat_requests) == sent
        assert (await progress()).status == "parked"
        await episodes.resume(handle.id)
        result = await asyncio.wait_for(handle.result(), 120)
        total = len(upstream.chat_requests)
    assert (result.termination, result.turns, result.restarts) == ("max_turns", 8, 0), result.error
    assert result.turns_replayed == at_park and result.replay_divergences == 0
    # After the resume, only the turns not recorded before the park called the model.
    assert total - sent == 2 * (8 - at_park)
