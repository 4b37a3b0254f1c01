"""`episodes doctor`: does the server honour task priority and fairness keys?

Asked by trying, not by version: workflows of a probe type no worker runs are
started on a fresh task queue of their own (nothing polls it, so their first tasks
wait in its backlog), then polled here by hand:

- priority: a priority-5 start, then a priority-1 start; served first should be the
  priority-1 one (first come, first served would serve the other);
- fairness: three starts under key `a`, then three under key `b` (equal weights); of
  the first two served, one should be `b`'s (first come, first served: `a`, `a`).

The probe workflows are terminated afterwards. A queue with several partitions (a
self-hosted cluster's default is 4) can mix the order up: a "not seen" there says
to check the server's dynamic config (`matching.enableFairness`), not that it is off.

Hazard: the backlog count rises when a task is written, a moment before the
matcher has loaded it; a poll in that moment is served whatever is loaded (the
priority-5 task alone). So the probe lets the backlog settle, and runs up to
`ROUNDS` rounds on fresh queues: a first-come-first-served server can never serve
`p1` or a `b` first, so one sighting is proof, and only a server that never does
in every round is called first come, first served.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from datetime import timedelta

from temporalio.api.enums.v1 import TaskQueueKind, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import (
    DescribeTaskQueueRequest,
    PollWorkflowTaskQueueRequest,
)
from temporalio.client import Client
from temporalio.common import Priority

PROBE_WORKFLOW = "episodes-doctor-fleet-probe"
POLL_S = 10.0
ROUNDS = 3
SETTLE_S = 0.3


async def probe_priority(client: Client) -> tuple[bool | None, bool | None]:
    """(priority honoured, fairness honoured); None: the probe could not tell."""
    priority: bool | None = None
    fairness: bool | None = None
    for _ in range(ROUNDS):
        p, f = await _probe_once(client)
        priority, fairness = _seen(priority, p), _seen(fairness, f)
        if priority and fairness:
            break
    return priority, fairness


def _seen(so_far: bool | None, now: bool | None) -> bool | None:
    """True once any round saw it; False when a round answered and none saw it."""
    if so_far or now:
        return True
    return False if False in (so_far, now) else None


async def _probe_once(client: Client) -> tuple[bool | None, bool | None]:
    queue = f"episodes-doctor-{uuid.uuid4().hex[:10]}"
    started: list[str] = []

    async def start(name: str, priority: Priority) -> None:
        wid = f"{queue}-{name}"
        await client.start_workflow(
            PROBE_WORKFLOW,
            id=wid,
            task_queue=queue,
            priority=priority,
            execution_timeout=timedelta(minutes=5),
        )
        started.append(wid)

    try:
        await start("p5", Priority(priority_key=5))
        await start("p1", Priority(priority_key=1))
        # A start returns before its task reaches the queue: poll once both wait there.
        await _backlog(client, queue, 2)
        first = await _poll(client, queue)
        await _poll(client, queue)
        priority = None if first is None else first.endswith("-p1")
        for name in ("a0", "a1", "a2"):
            await start(name, Priority(fairness_key="a"))
        for name in ("b0", "b1", "b2"):
            await start(name, Priority(fairness_key="b"))
        await _backlog(client, queue, 6)
        served = [await _poll(client, queue) for _ in range(2)]
        fairness = None if None in served else any(w and w[-2] == "b" for w in served)
        return priority, fairness
    finally:
        await asyncio.gather(*(_terminate(client, wid) for wid in started))


async def _poll(client: Client, queue: str) -> str | None:
    """The workflow id of the next workflow task on the queue, None if none came."""
    try:
        resp = await client.workflow_service.poll_workflow_task_queue(
            PollWorkflowTaskQueueRequest(
                namespace=client.namespace,
                task_queue=TaskQueue(name=queue, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL),
                identity="episodes-doctor",
            ),
            timeout=timedelta(seconds=POLL_S),
        )
    except Exception:
        return None
    return resp.workflow_execution.workflow_id or None


async def _backlog(client: Client, queue: str, n: int) -> None:
    """Until the server counts n workflow tasks waiting on the queue (or a few seconds
    passed: then the probe goes on and may see less)."""
    deadline = time.monotonic() + POLL_S
    while time.monotonic() < deadline:
        resp = await client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=client.namespace,
                task_queue=TaskQueue(name=queue),
                task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
                report_stats=True,
            ),
            timeout=timedelta(seconds=POLL_S),
        )
        if resp.stats.approximate_backlog_count >= n:
            await asyncio.sleep(SETTLE_S)  # counted on write, matched once loaded
            return
        await asyncio.sleep(0.1)


async def _terminate(client: Client, wid: str) -> None:
    with contextlib.suppress(Exception):
        await client.get_workflow_handle(wid).terminate("episodes doctor: fleet probe done")
