"""The Temporal floor: a bare workflow calling a no-op activity N times.

No harness, no environment, no pydantic models: what one turn costs Temporal alone
in each dispatch mode, so the overhead benchmark (`turn_overhead`) reads the shipped
workflow's figure against it. (It served the turn-design study first: bench/README.md.)
- `cross`: activities on another task queue (the worker-specific-queue pattern),
- `same`: activities on the workflow's own queue (eager dispatch to this worker),
- `local`: local activities (run inside the workflow task, no dispatch at all).
The activity returns a monotonic timestamp; per-turn latency is the gap between
consecutive stamps.
"""

from __future__ import annotations

import time
from datetime import timedelta

from temporalio import activity, workflow


@activity.defn(name="floor_noop")
async def floor_noop(_: int) -> int:
    return time.monotonic_ns()


@workflow.defn(name="FloorWorkflow")
class FloorWorkflow:
    @workflow.run
    async def run(self, turns: int, mode: str, queue: str) -> list[int]:
        stamps = []
        for n in range(turns):
            if mode == "local":
                stamp = await workflow.execute_local_activity(
                    floor_noop, n, start_to_close_timeout=timedelta(seconds=30)
                )
            else:
                stamp = await workflow.execute_activity(
                    floor_noop,
                    n,
                    task_queue=queue if mode == "cross" else None,
                    start_to_close_timeout=timedelta(seconds=30),
                )
            stamps.append(stamp)
        return stamps
