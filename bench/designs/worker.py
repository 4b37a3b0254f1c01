"""One worker process hosting every prototype design side by side.

Like `workers.worker.EpisodeWorker` (same activities, same backpressure on the
shared queue), except that the session queue also runs workflows (the designs whose
turn loop lives on the session's worker) and the extra session activities.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from datetime import timedelta

from temporalio.client import Client
from temporalio.worker import (
    FixedSizeSlotSupplier,
    UnsandboxedWorkflowRunner,
    Worker,
    WorkerTuner,
)

from activities.session import score_transcript_activity
from bench.designs.activities import DesignActivities
from bench.designs.baseline import TurnPerActivityEpisode
from bench.designs.child import (
    ChildEagerEpisode,
    ChildLocal2sEpisode,
    ChildLocalEpisode,
    ChildLocalSyncEpisode,
    SessionLoop,
)
from bench.designs.floor import FloorWorkflow, floor_noop
from bench.designs.group import GroupEpisodes, run_group
from bench.designs.updates import (
    UpdateAhead1Episode,
    UpdateAhead32Episode,
    UpdateEpisode,
    UpdateLagEpisode,
    UpdateLingerEpisode,
)
from episodes.session.registry import SessionRegistry
from workers.backpressure import SessionSlots
from workflows.episode import EpisodeWorkflow

SHARED_WORKFLOWS = [
    EpisodeWorkflow,
    TurnPerActivityEpisode,
    ChildLocalEpisode,
    ChildLocal2sEpisode,
    ChildLocalSyncEpisode,
    ChildEagerEpisode,
    UpdateEpisode,
    UpdateAhead1Episode,
    UpdateAhead32Episode,
    UpdateLingerEpisode,
    UpdateLagEpisode,
    FloorWorkflow,
    GroupEpisodes,
]


class DesignWorker:
    def __init__(
        self,
        client: Client,
        task_queue: str,
        *,
        max_sessions: int = 256,
        interceptors=(),
        sandbox: bool = True,
        max_cached_workflows: int = 1000,
    ):
        self.worker_id = f"design-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.task_queue = task_queue
        self.session_queue = f"{task_queue}-session-{self.worker_id}"
        self.registry = SessionRegistry(max_sessions)
        acts = self.activities = DesignActivities(
            self.registry, session_queue=self.session_queue, worker_id=self.worker_id
        )
        grace = timedelta(seconds=5)
        self._shared = Worker(
            client,
            task_queue=task_queue,
            workflows=SHARED_WORKFLOWS,
            activities=[acts.provision, score_transcript_activity, floor_noop, run_group],
            tuner=WorkerTuner.create_composite(
                workflow_supplier=FixedSizeSlotSupplier(100),
                activity_supplier=SessionSlots(self.registry),
                local_activity_supplier=FixedSizeSlotSupplier(100),
                nexus_supplier=FixedSizeSlotSupplier(1),
            ),
            graceful_shutdown_timeout=grace,
            identity=f"{self.worker_id}@shared",
            max_cached_workflows=max_cached_workflows,
            **({} if sandbox else {"workflow_runner": UnsandboxedWorkflowRunner()}),
        )
        self._sessions = Worker(
            client,
            task_queue=self.session_queue,
            workflows=[SessionLoop],
            activities=[
                acts.turn,
                acts.score,
                acts.release,
                acts.turn_local,
                acts.score_local,
                acts.watch,
                acts.drive,
                acts.design_drive,
                floor_noop,
            ],
            max_concurrent_activities=max(8, max_sessions * 3),
            max_concurrent_local_activities=max(8, max_sessions * 2),
            graceful_shutdown_timeout=grace,
            identity=f"{self.worker_id}@session",
            max_cached_workflows=max_cached_workflows,
            interceptors=interceptors,
        )
        self._stop = asyncio.Event()

    async def run(self) -> None:
        try:
            async with self._shared, self._sessions:
                await self._stop.wait()
        finally:
            entries = self.registry.entries()
            for e in entries:
                self.registry.pop(e.session.session_id)
            await asyncio.gather(*(e.session.close() for e in entries), return_exceptions=True)

    def request_stop(self) -> None:
        self._stop.set()

    @contextlib.asynccontextmanager
    async def running(self):
        task = asyncio.create_task(self.run())
        try:
            yield self
        finally:
            self.request_stop()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def _main(argv: list[str] | None = None) -> None:
    """`python -m bench.designs.worker --address A --task-queue Q`: a design worker process."""
    import argparse
    import signal

    from episodes.client.connect import connect

    parser = argparse.ArgumentParser(prog="python -m bench.designs.worker")
    parser.add_argument("--address", default="127.0.0.1:7233")
    parser.add_argument("--task-queue", required=True)
    parser.add_argument("--max-sessions", type=int, default=256)
    args = parser.parse_args(argv)
    client = await connect(args.address, timeout_s=30)
    worker = DesignWorker(client, args.task_queue, max_sessions=args.max_sessions)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, worker.request_stop)
    await worker.run()


if __name__ == "__main__":
    asyncio.run(_main())
