"""A retried turn activity returns the recorded reply; the harness sees the message once."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import uuid

from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.exceptions import ApplicationError
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

from episodes.client import EpisodesClient
from episodes.messages import EpisodeProgress
from tests.conftest import ROOT
from tests.integration.helpers import spec
from workers.worker import EpisodeWorker, WorkerOptions

COUNTING = [sys.executable, str(ROOT / "tests" / "harnesses" / "counting_harness.py")]


class LoseCompletionOnce(Interceptor):
    """The turn runs on the harness, then its completion is 'lost' once: Temporal retries."""

    def __init__(self, turn: int) -> None:
        self.turn = turn
        self.injected = 0

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        outer = self

        class _In(ActivityInboundInterceptor):
            async def execute_activity(self, input: ExecuteActivityInput):
                result = await super().execute_activity(input)
                info = activity.info()
                if (
                    info.activity_type == "turn"
                    and input.args[0].turn == outer.turn
                    and info.attempt == 1
                ):
                    outer.injected += 1
                    raise ApplicationError("injected: the completion was lost")
                return result

        return _In(next)


async def test_retried_turn_is_not_resent(client) -> None:
    queue = f"exactly-once-{uuid.uuid4().hex[:6]}"
    chaos = LoseCompletionOnce(turn=1)
    w = EpisodeWorker(client, WorkerOptions(task_queue=queue), interceptors=[chaos])
    running = asyncio.create_task(w.run())
    try:
        s = spec(
            name=f"once-{uuid.uuid4().hex[:6]}",
            command=COUNTING,
            tasks=[{"id": "t0", "data": {"messages": ["m0", "m1", "m2"]}}],
        )
        ec = EpisodesClient(client, task_queue=queue)
        handle = await ec.start_episode(s, s.tasks[0])
        result = await handle.result()
        assert result.termination == "env_done" and result.turns == 3
        assert chaos.injected == 1

        # The history shows turn 1 ran twice (attempt 2) ...
        attempts = []
        async for ev in handle.fetch_history_events():
            if ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                attempts.append(ev.activity_task_started_event_attributes.attempt)
        assert 2 in attempts
        # ... yet the harness received each turn exactly once: 1, 2, 3.
        progress = await handle.query("progress", result_type=EpisodeProgress)
        received = [t.reply["received"] for t in progress.turns]
        assert received == [1, 2, 3]
        assert [t.reply["message"] for t in progress.turns] == ["m0", "m1", "m2"]
    finally:
        w.request_stop()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(running, 30)
