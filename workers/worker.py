"""The worker process: shared queue (workflows + provision) and its own session queue.

One `EpisodeWorker` runs two Temporal workers in one process:
- on the shared queue: EpisodeWorkflow and `provision` (gated by `max_sessions`);
- on a queue unique to this process: `drive` (an episode's turn loop), `turn` and
  `score` (interactive steps), `release` for the sessions it holds in memory;
- on the side queue (`contract.side_queue`): `await_episode`, which holds no session
  and may wait a day, so it has slots of its own and never takes provision's.
A reaper stops sessions whose workflow has closed or that sat idle past a TTL;
shutdown stops every live harness.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import FixedSizeSlotSupplier, Interceptor, Worker, WorkerTuner

from activities.batch import await_episode
from activities.session import SessionActivities, score_transcript_activity
from episodes import contract
from episodes.messages import DEFAULT_TASK_QUEUE
from episodes.registry import SessionRegistry
from episodes.runtimes.pools import WorkerPools
from workers.backpressure import SessionSlots
from workers.orphans import reap_orphan_containers
from workflows import WORKFLOWS

log = logging.getLogger("episodes.worker")


@dataclass
class WorkerOptions:
    task_queue: str = DEFAULT_TASK_QUEUE
    max_sessions: int = 256
    # A session nobody has touched for this long is stopped (its workflow is stuck or gone).
    session_idle_ttl_s: float = 3600.0
    reap_interval_s: float = 30.0
    max_concurrent_workflow_tasks: int = 100
    # `await_episode` (a re-run batch waiting for an existing episode) in flight at once.
    max_side_activities: int = 1000
    graceful_shutdown_s: float = 5.0
    worker_id: str | None = None


class EpisodeWorker:
    def __init__(
        self,
        client: Client,
        options: WorkerOptions | None = None,
        *,
        interceptors: Sequence[Interceptor] = (),
    ):
        self.client = client
        self.options = opts = options or WorkerOptions()
        self.worker_id = opts.worker_id or (
            f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        )
        self.session_queue = f"{opts.task_queue}-session-{self.worker_id}"
        self.registry = SessionRegistry(opts.max_sessions)
        self.pools = WorkerPools()
        self.activities = SessionActivities(
            self.registry,
            session_queue=self.session_queue,
            worker_id=self.worker_id,
            pools=self.pools,
        )
        self.slots = SessionSlots(self.registry)
        self.reaped = 0
        self._stop = asyncio.Event()
        self._shared = Worker(
            client,
            task_queue=opts.task_queue,
            workflows=WORKFLOWS,
            activities=[
                self.activities.provision,
                self.activities.restore,
                score_transcript_activity,
                await_episode,  # histories from before the side queue schedule it here
            ],
            tuner=WorkerTuner.create_composite(
                workflow_supplier=FixedSizeSlotSupplier(opts.max_concurrent_workflow_tasks),
                activity_supplier=self.slots,
                local_activity_supplier=FixedSizeSlotSupplier(100),
                nexus_supplier=FixedSizeSlotSupplier(1),
            ),
            graceful_shutdown_timeout=_seconds(opts.graceful_shutdown_s),
            identity=f"{self.worker_id}@shared",
        )
        self._sessions = Worker(
            client,
            task_queue=self.session_queue,
            activities=[
                self.activities.drive,
                self.activities.turn,
                self.activities.score,
                self.activities.release,
            ],
            # Each live session has at most one drive, turn, score or release in flight.
            max_concurrent_activities=max(8, opts.max_sessions * 2),
            graceful_shutdown_timeout=_seconds(opts.graceful_shutdown_s),
            identity=f"{self.worker_id}@session",
            interceptors=interceptors,
        )

        self._side = Worker(
            client,
            task_queue=contract.side_queue(opts.task_queue),
            activities=[await_episode],
            max_concurrent_activities=opts.max_side_activities,
            graceful_shutdown_timeout=_seconds(opts.graceful_shutdown_s),
            identity=f"{self.worker_id}@side",
        )

    async def run(self) -> None:
        """Poll until `request_stop()`; then stop polling and stop every live harness."""
        log.info(
            "worker %s: shared queue %r, session queue %r",
            self.worker_id,
            self.options.task_queue,
            self.session_queue,
        )
        # Each removal is logged; the count is nobody's business here.
        await asyncio.to_thread(reap_orphan_containers)
        reaper = asyncio.create_task(self._reap_forever())
        try:
            async with self._shared, self._sessions, self._side:
                await self._stop.wait()
        finally:
            reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reaper
            await asyncio.shield(self.close_all())

    def request_stop(self) -> None:
        self._stop.set()

    async def close_all(self) -> None:
        entries = self.registry.entries()
        for entry in entries:
            self.registry.pop(entry.session.session_id)
        await asyncio.gather(*(e.session.close() for e in entries), return_exceptions=True)
        await self.pools.close()

    # -- reaper --------------------------------------------------------------------

    async def _reap_forever(self) -> None:
        while True:
            await asyncio.sleep(self.options.reap_interval_s)
            try:
                await self.reap_once()
            except Exception:  # the reaper must outlive a flaky server call
                log.exception("reaper pass failed")

    async def reap_once(self) -> int:
        """Stop sessions that are idle past the TTL or whose workflow is no longer running."""
        now = time.monotonic()
        doomed = []
        for entry in self.registry.entries():
            if now - entry.session.last_used > self.options.session_idle_ttl_s:
                doomed.append((entry, "idle past the TTL"))
            elif not await self._workflow_running(entry.workflow_id, entry.run_id):
                doomed.append((entry, "its workflow is no longer running"))
        for entry, why in doomed:
            if self.registry.pop(entry.session.session_id) is not None:
                log.warning("reaping session %s: %s", entry.session.session_id, why)
                await entry.session.close()
                self.reaped += 1
        return len(doomed)

    async def _workflow_running(self, workflow_id: str, run_id: str | None) -> bool:
        try:
            desc = await self.client.get_workflow_handle(workflow_id, run_id=run_id).describe()
        except RPCError as e:
            if e.status == RPCStatusCode.NOT_FOUND:
                return False  # the namespace forgot it: nothing will ever release it
            raise
        if desc.status == WorkflowExecutionStatus.CONTINUED_AS_NEW and run_id is not None:
            # A long episode between runs: its latest run drives the same session.
            return await self._workflow_running(workflow_id, None)
        return desc.status == WorkflowExecutionStatus.RUNNING

    def stats(self) -> dict[str, object]:
        stats: dict[str, object] = {
            "worker_id": self.worker_id,
            "sessions": len(self.registry),
            "max_sessions": self.registry.max_sessions,
            "reaped": self.reaped,
        }
        stats["pool"] = self.pools.stats.model_dump()
        return stats


def _seconds(s: float) -> timedelta:
    return timedelta(seconds=s)
