"""The worker process: shared queue (workflows + provision) and its own session queue.

One `EpisodeWorker` runs four Temporal workers in one process:
- on the shared queue: the workflows (and the batch's activities), and, as a worker
  of its own so that it can stop polling alone, `provision` (gated by `max_sessions`);
- on a queue unique to this process: `drive` (an episode's turn loop), `turn` and
  `score` (interactive steps), `release` for the sessions it holds in memory;
- on the side queue (`contract.side_queue`): `await_episode` (and `await_group`,
  `recorded_usage`), which hold no session and may wait a day, so they have slots of
  their own and never take provision's.
A reaper stops sessions whose workflow has closed or that sat idle past a TTL.
Stopping drains (workers/drain.py): provisions stop at once, live sessions get up
to `drain_timeout_s` to finish, the rest are abandoned; every live harness is stopped.
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

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import (
    FixedSizeSlotSupplier,
    Interceptor,
    Worker,
    WorkerTuner,
)

from activities import telemetry
from activities.batch import await_episode, recorded_usage
from activities.group import GroupActivities, await_group
from activities.session import SessionActivities, score_transcript_activity
from episodes import contract
from episodes.breaker import ProvisionBreaker
from episodes.envs.base import set_env_threads
from episodes.payloads.settings import stores_externally
from episodes.runtimes.pool.worker_pools import WorkerPools
from episodes.session.registry import SessionRegistry
from episodes.truncate import HISTORY_TURN_LIMIT
from workers.backpressure import SessionSlots
from workers.drain import DrainInterceptor, DrainState
from workers.options import (
    WorkerOptions,
    deployment_config,
    precompile_workflows,
    seconds,
    workflow_runner,
)
from workers.orphans import reap_orphans
from workflows import WORKFLOWS

log = logging.getLogger("episodes.worker")


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
        if opts.workflow_sandbox:
            precompile_workflows()
        self.worker_id = opts.worker_id or (
            f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        )
        self.session_queue = f"{opts.task_queue}-session-{self.worker_id}"
        self.registry = SessionRegistry(opts.max_sessions)
        set_env_threads(opts.env_threads)
        self.pools = WorkerPools(
            max_ttl_s=opts.pool_ttl_s,
            max_idle=opts.pool_max_idle,
            max_warm=opts.pool_max_warm,
            box_caps=opts.box_caps,
        )
        self.breaker = (
            ProvisionBreaker(opts.provision_breaker_after, name=f"worker {self.worker_id}")
            if opts.provision_breaker_after
            else None
        )
        self.activities = SessionActivities(
            self.registry,
            session_queue=self.session_queue,
            worker_id=self.worker_id,
            pools=self.pools,
            # With external storage a turn is recorded whole; without, it must fit inline.
            history_limit_bytes=None
            if stores_externally(client.data_converter)
            else (HISTORY_TURN_LIMIT),
            breaker=self.breaker,
        )
        # Group execution's one activity (a group's members in-process): gated like provision.
        self.groups = GroupActivities(
            worker_id=self.worker_id,
            history_limit_bytes=self.activities.history_limit_bytes,
            pools=self.pools,
        )
        self.slots = SessionSlots(
            self.registry,
            self.breaker,
            extra=self.groups.beyond_permits,
            placed=self.groups.placed_beyond,
            box_wait=lambda: self.pools.caps.waiting > 0,
        )
        self.groups.room = self.slots.has_room_for_member
        telemetry.LIVE_SESSIONS.labels(worker=self.worker_id).set_function(self.live_sessions)
        telemetry.MAX_SESSIONS.labels(worker=self.worker_id).set(opts.max_sessions)
        telemetry.BOX_WAITS.labels(worker=self.worker_id).set_function(
            lambda: float(self.pools.caps.waiting)
        )
        telemetry.PROVISIONS_PAUSED.labels(worker=self.worker_id).set_function(
            lambda: float(self._provisions_paused())
        )
        deployment = deployment_config(opts)
        self.drain = DrainState(self.worker_id)
        self.drain.drain_timeout_s = opts.drain_timeout_s
        drain = [DrainInterceptor(self.drain)]
        self.reaped = 0
        self.abandoned: list[str] = []  # session ids given up when a drain timed out
        self._stop = asyncio.Event()
        self._stop_now = asyncio.Event()
        # Workflows and their local activity only (one worker per queue and task type).
        self._shared = Worker(
            client,
            task_queue=opts.task_queue,
            workflows=WORKFLOWS,
            activities=[score_transcript_activity],
            no_remote_activities=True,
            workflow_runner=workflow_runner(opts.workflow_sandbox),
            max_concurrent_workflow_tasks=opts.max_concurrent_workflow_tasks,
            sticky_queue_schedule_to_start_timeout=seconds(opts.sticky_timeout_s),
            graceful_shutdown_timeout=seconds(opts.graceful_shutdown_s),
            identity=f"{self.worker_id}@shared",
            deployment_config=deployment,
        )
        # The shared queue's activities, in a worker of their own so that a drain can
        # stop their polls (a poll in flight would still be handed a provision) while
        # workflows and sessions go on.
        self._provisions = Worker(
            client,
            task_queue=opts.task_queue,
            activities=[
                self.activities.provision,
                self.activities.restore,  # a new session too: gated like provision
                self.groups.run_group,  # a group's sessions: gated like provision
                await_episode,  # histories from before the side queue schedule it here
            ],
            tuner=WorkerTuner.create_composite(
                workflow_supplier=FixedSizeSlotSupplier(1),
                activity_supplier=self.slots,
                local_activity_supplier=FixedSizeSlotSupplier(1),
                nexus_supplier=FixedSizeSlotSupplier(1),
            ),
            # A provision already running when the drain starts may finish in its time.
            graceful_shutdown_timeout=seconds(max(opts.drain_timeout_s, 1.0)),
            identity=f"{self.worker_id}@provision",
            interceptors=drain,
            # The shared queue is versioned: its activity pollers carry the same build.
            deployment_config=deployment,
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
            graceful_shutdown_timeout=seconds(opts.graceful_shutdown_s),
            identity=f"{self.worker_id}@session",
            interceptors=[*interceptors, *drain],
            # Not versioned: the queue is this process's alone (its name routes), and a
            # version would keep every dead worker's queue as one the next must poll.
        )

        self._side = Worker(
            client,
            task_queue=contract.side_queue(opts.task_queue),
            activities=[await_episode, await_group, recorded_usage],
            max_concurrent_activities=opts.max_side_activities,
            graceful_shutdown_timeout=seconds(opts.graceful_shutdown_s),
            identity=f"{self.worker_id}@side",
        )

    async def run(self) -> None:
        """Poll until `request_stop()`; then drain, stop polling and stop every live harness."""
        log.info(
            "worker %s: shared queue %r, session queue %r",
            self.worker_id,
            self.options.task_queue,
            self.session_queue,
        )
        # Each removal is logged; the count is nobody's business here.
        await asyncio.to_thread(reap_orphans)
        reaper = asyncio.create_task(self._reap_forever())
        try:
            async with self._shared, self._provisions, self._sessions, self._side:
                await self._stop.wait()
                await self._drain()
        finally:
            reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reaper
            await asyncio.shield(self.close_all())

    def request_stop(self, *, drain: bool = True) -> None:
        """Stop: drain first (up to `drain_timeout_s`); a second call, or drain=False,
        abandons the live sessions at once."""
        if self._stop.is_set() or not drain:
            self._stop_now.set()
        self._stop.set()

    async def _drain(self) -> None:
        """No new provisions; live sessions run until released or the drain timeout."""
        self.drain.draining = True
        self.slots.stop()
        stopping = asyncio.create_task(self._provisions.shutdown())
        timeout = self.options.drain_timeout_s
        log.info(
            "worker %s draining: no new sessions; %d live session(s) get up to %g s",
            self.worker_id,
            len(self.registry),
            timeout,
        )
        deadline = time.monotonic() + timeout
        next_reap = time.monotonic() + self.options.reap_interval_s
        # A provision in flight adds a session: wait for it too.
        while (len(self.registry) or self.drain.provisioning) and not self._stop_now.is_set():
            now = time.monotonic()
            if now >= deadline:
                break
            if now >= next_reap:  # a closed workflow's session must not hold the drain
                with contextlib.suppress(Exception):
                    await self.reap_once()
                next_reap = now + self.options.reap_interval_s
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop_now.wait(), min(0.1, max(0.0, deadline - now)))
        left = self.registry.entries()
        self.drain.at_once = self._stop_now.is_set()
        if left:
            self.abandoned = [e.session.session_id for e in left]
            log.warning(
                "worker %s: drain ended with %d session(s) still live; abandoning them "
                "(their episodes see the worker as lost): %s",
                self.worker_id,
                len(left),
                ", ".join(f"{e.session.session_id} (workflow {e.workflow_id})" for e in left),
            )
        else:
            log.info("worker %s drained: every session finished", self.worker_id)
        # In-flight drives, turns and scores fail now (SessionNotFound), not after a
        # heartbeat timeout; then their harnesses are stopped.
        self.drain.abandon()
        await self.close_all()
        await stopping

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
        """Stop sessions that are idle past the TTL or whose workflow is no longer running.

        A busy session (a turn or a drive in flight) is not idle, and one whose own wait is
        longer (its turn_timeout_s, an interactive idle_timeout_s) gets that long: the TTL
        must not close a session mid-turn or in a trainer's legitimate pause.
        """
        now = time.monotonic()
        doomed = []
        for entry in self.registry.entries():
            bound = max(self.options.session_idle_ttl_s, entry.patience_s)
            if not entry.busy and now - entry.session.last_used > bound:
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

    def _provisions_paused(self) -> bool:
        return self.breaker is not None and self.breaker.is_open()

    def live_sessions(self) -> int:
        """Its registry's sessions and its groups' live members."""
        return len(self.registry) + self.groups.members

    def stats(self) -> dict[str, object]:
        stats: dict[str, object] = {
            "worker_id": self.worker_id,
            "sessions": self.live_sessions(),
            "max_sessions": self.registry.max_sessions,
            "reaped": self.reaped,
            "provisions_paused": self._provisions_paused(),
            "provision_failures_in_a_row": self.breaker.failures if self.breaker else 0,
        }
        stats["pool"] = self.pools.stats.model_dump()
        stats["warm"] = self.pools.warm_stats.model_dump()
        stats["boxes"] = self.pools.caps.counts()
        return stats
