"""A batch run by the server counts its parked episodes (issue 42): its `progress` and
`metrics` queries say how many of its episodes in flight are parked, as a client's
batch does (`episodes.client.batch.live.LiveFigure.parked`), and none once they
resumed. Stand-in activities on the time-skipping server; the parked episode's child
workflow tells its batch when it parks and when it resumes."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from episodes import contract
from episodes.types.io import (
    BatchInput,
    BatchProgress,
    BatchResult,
    DriveInput,
    DriveResult,
    EpisodeProgress,
)
from episodes.types.metrics import BatchMetrics
from episodes.types.results import ScoreResult
from tests.support.helpers import wait_until
from tests.workflows.standins import StandIns, spec, turn_result


class Parkable(StandIns):
    """The drive waits for its gate, then records turn by turn and pauses when asked."""

    def __init__(self, client: Any) -> None:
        super().__init__(client)
        self.drive_gate = asyncio.Event()

    async def on_drive(self, inp: DriveInput) -> DriveResult:
        await self.drive_gate.wait()
        for n in range(inp.first_turn, inp.max_turns):
            if not await self.record(inp, [turn_result(n)]) and n + 1 < inp.max_turns:
                return DriveResult(next_turn=n + 1)  # paused: parked next
        return DriveResult(
            termination="max_turns", next_turn=inp.max_turns, score=ScoreResult(reward=1.0)
        )


async def test_a_server_batch_counts_its_parked_episodes(env, batch: str | None = None) -> None:
    """`batch`: histories/record_attempts.py names it, to save its history."""
    s = Parkable(env.client)
    batch = batch or f"bp-{uuid.uuid4().hex[:6]}"
    async with s.running():
        handle = await env.client.start_workflow(
            contract.BATCH_WORKFLOW,
            BatchInput(spec=spec(tasks=[{"id": "t"}], max_turns=20), batch=batch),
            id=contract.batch_workflow_id(batch),
            task_queue=s.shared_queue,
            result_type=BatchResult,
        )
        await s.started("drive")
        child = env.client.get_workflow_handle(contract.episode_id(batch, "t", 0))
        await child.signal(contract.PARK)
        s.drive_gate.set()

        async def child_parked() -> bool:
            p = await child.query(contract.PROGRESS, result_type=EpisodeProgress)
            return p.status == "parked"

        assert await wait_until(child_parked, timeout=60)

        async def batch_counts(n: int) -> bool:
            p = await handle.query(contract.PROGRESS, result_type=BatchProgress)
            m = await handle.query(contract.METRICS, result_type=BatchMetrics)
            # Parked: still running (in flight). Resumed: it may have finished already.
            return (p.parked, m.parked) == (n, n) and (p.running == 1 or not n)

        assert await wait_until(lambda: batch_counts(1), timeout=60)
        await child.signal(contract.RESUME)
        assert await wait_until(lambda: batch_counts(0), timeout=60)
        result = await asyncio.wait_for(handle.result(), 120)
    assert result.metrics.count == 1 and result.metrics.parked == 0
    assert result.metrics.terminations == {"max_turns": 1}
