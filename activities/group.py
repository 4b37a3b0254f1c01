"""`run_group`: every member of a group driven to its end in-process, on one worker.

The group's one activity (`workflows/group.py`, design in `episodes.types.group`):
each member is a `LiveSession` run by the same `TurnLoop` as a `drive` (an in-memory
sink, as `episodes.local`), so a group pays one workflow's Temporal cost instead of
one per episode.

Durability: the activity heartbeats every member's finished turns (`GroupProgress`).
A worker lost mid-group goes silent; after `worker_lost_timeout_s` the server retries
the activity on another worker (the spec's `max_restarts` with `on_worker_lost:
restart`), and the retry restores each member that had not ended from the last
heartbeat through the restart path (`LiveSession.restore`: a fresh box and harness,
the recorded turns replayed exactly), then turns on from there. Members that had
ended keep their result. A turn is recorded once per member: the record is the
member's turn list, appended in turn order; turns the lost worker finished after its
last heartbeat are run again (uncounted), as with a drive's turns after its last
heartbeat.

Cuts (the group's `oversample` and `group_timeout_s`, as `episodes.client.group.stream`
does them for one workflow per episode): the activity returns once `samples` members
ended, cancelling the spares still running (`cut: straggler`), or at the deadline (the
activity's first scheduling plus `group_timeout_s`, the same on a retry), cancelling
the members still running (`cut: group_timeout`). A cut member's sessions close and
its result is `cancelled` with the turns it had.

Capacity: the group holds one of the worker's session slots (`workers.backpressure`);
its first live member uses that place, each other one waits for a free place among
`max_sessions` before its session starts (`_place`), so the limit holds for groups of
any size. Size: the record (every member's turns) must fit one payload
(`activities.group_record`): past its bound the group stops with `GroupTooBig`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from activities.batch import await_workflow
from activities.group_record import GroupRecord, MemberSink
from activities.session import spec_error_type
from episodes import contract
from episodes.errors import EnvironmentFailed, HarnessFailure, SpecError
from episodes.runtimes.pool.worker_pools import WorkerPools
from episodes.session.drive import TurnLoop
from episodes.session.live import LiveSession
from episodes.types.group import (
    GroupInput,
    GroupProgress,
    GroupResult,
    MemberState,
    member_id,
    member_result,
)
from episodes.types.io import DriveResult
from episodes.types.results import Cut, EpisodeResult, ScoreResult, Termination

log = logging.getLogger("episodes.activities.group")

PLACE_POLL_S = 0.05  # as the worker's session slots poll for room


class GroupActivities:
    def __init__(
        self,
        *,
        worker_id: str,
        history_limit_bytes: int | None = None,
        pools: WorkerPools | None = None,
    ) -> None:
        self.worker_id = worker_id
        self.history_limit_bytes = history_limit_bytes
        # The worker's pools: members claim the warm boxes their spec asks for.
        self.pools = pools
        self.groups = 0  # `run_group` activities running here
        self.members = 0  # their live member sessions
        self.waiting = 0  # members waiting for a place
        self._live: dict[int, int] = {}  # live members by group (one `run_group` call)
        # Whether the worker has a place for one more session beside its registry's, its
        # slot permits' and `placed_beyond()` (the worker sets it; alone: always).
        self.room: Callable[[], bool] = lambda: True

    def placed_beyond(self) -> int:
        """Live member sessions beyond the one slot permit each group holds (its first
        live member's place)."""
        return sum(max(0, n - 1) for n in self._live.values())

    def beyond_permits(self) -> int:
        """What the worker's session slots count on top of its registry and permits
        (`workers.backpressure`): the places members hold beyond their groups'
        permits, and those members wait for (admitted groups go first)."""
        return self.placed_beyond() + self.waiting

    @contextlib.asynccontextmanager
    async def _place(self, group: int) -> AsyncIterator[None]:
        """A place among the worker's `max_sessions` for one member while its session
        lives: the group's permit for its first live member, a free place for the rest
        (they wait for one: `max_sessions` holds however large the group)."""
        if self._live[group]:
            self.waiting += 1
            try:  # (the group's own place frees too once its live members ended)
                while self._live[group] and not self.room():
                    await asyncio.sleep(PLACE_POLL_S)
            finally:
                self.waiting -= 1
        self._live[group] += 1
        self.members += 1
        try:
            yield
        finally:
            self._live[group] -= 1
            self.members -= 1

    @activity.defn(name=contract.RUN_GROUP)
    async def run_group(self, inp: GroupInput) -> GroupProgress:
        info = activity.info()
        progress = _restored(info.heartbeat_details, inp.size)
        record = GroupRecord(progress, self.history_limit_bytes, inp.group_workflow_id)
        restart = info.attempt > 1
        beat = asyncio.create_task(_beat(record))
        deadline = None
        if inp.group_timeout_s is not None:  # from the first attempt's scheduling on
            deadline = info.scheduled_time.timestamp() + inp.group_timeout_s
        self.groups += 1
        group = id(record)
        self._live[group] = 0
        running = {
            asyncio.create_task(self._member(inp, m, restart, record, group)): m
            for m in progress.members
            if m.result is None
        }
        over = asyncio.create_task(record.outgrown())
        try:
            pending = set(running)
            why: Cut = "straggler"
            while pending and _ended(progress) < inp.samples and not record.over.is_set():
                left = None if deadline is None else max(0.0, deadline - time.time())
                done, pending = await asyncio.wait(
                    {*pending, over}, timeout=left, return_when=asyncio.FIRST_COMPLETED
                )
                pending.discard(over)
                done.discard(over)
                for t in done:
                    t.result()  # a member's unexpected error fails the attempt
                if not done and not record.over.is_set():
                    why = "group_timeout"
                    break
            if not record.fits():  # what the result would carry: stop every member
                raise _too_big(record)
            for t in pending:  # spares past `samples` ended (oversample), or too late
                t.cancel()
            # (the activity's own cancellation still raises here)
            await asyncio.gather(*pending, return_exceptions=True)
            for t in pending:
                m = running[t]
                if m.result is None:  # not one that ended in the same moment
                    m.result = _cut(inp, m, why, started=info.started_time.timestamp())
        finally:
            over.cancel()
            for t in running:  # the activity cancelled (a stale group), or failed
                t.cancel()
            await asyncio.gather(*running, return_exceptions=True)
            self.groups -= 1
            del self._live[group]
            beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beat
        return progress

    async def _member(
        self, inp: GroupInput, m: MemberState, restart: bool, record: GroupRecord, group: int
    ) -> None:
        if m.result is not None:
            return  # ended before the worker was lost: its result stands
        async with self._place(group):
            await self._run_member(inp, m, restart, record)

    async def _run_member(
        self, inp: GroupInput, m: MemberState, restart: bool, record: GroupRecord
    ) -> None:
        spec, task = inp.spec, inp.task
        wid = member_id(inp.group_workflow_id, m.sample)
        started = time.monotonic()
        session = LiveSession(
            spec,
            task,
            m.sample,
            f"{wid}:{uuid.uuid4().hex[:10]}",
            warm=self.pools.warm_boxes(spec.pool) if self.pools is not None else None,
            caps=self.pools.caps if self.pools is not None else None,
            labels={"worker": self.worker_id, "workflow": wid},
            history_limit_bytes=self.history_limit_bytes,
        )
        ended: DriveResult
        config_error = False
        try:
            try:
                m.first_message = await session.open()
                m.runtime = session.runtime_type
                if restart:
                    m.restarts += 1
                    if m.turns:
                        records = [t.record for t in m.turns]
                        divergent, _ = await session.restore(records)
                        m.turns_replayed += len(records)
                        m.replay_divergences += len(divergent)
            except (HarnessFailure, EnvironmentFailed, SpecError) as e:
                # The harness never started (or its replay broke it), the env's reset
                # raised, or the spec cannot start here (an env the worker cannot import,
                # a secret it cannot read: EpisodeWorkflow's `harness_start_failed` with
                # `config_error`): the member's outcome, not the group's failure.
                termination: Termination = "env_error"
                if isinstance(e, HarnessFailure):
                    termination = e.error_type
                elif isinstance(e, SpecError):
                    termination, config_error = "harness_start_failed", True
                error = session.scrub_error(e)
                ended = DriveResult(termination=termination, error=error, next_turn=len(m.turns))
            else:
                loop = TurnLoop(
                    session,
                    MemberSink(m, record),
                    max_turns=spec.max_turns,
                    first_turn=len(m.turns),
                )
                ended = await loop.run()
        finally:
            await session.close()
        score = ended.score or ScoreResult()
        m.result = member_result(
            inp.group_workflow_id,
            spec,
            task.id,
            m,
            termination=ended.termination or "max_turns",
            error=ended.error,
            duration_s=time.monotonic() - started,
            reward=score.reward,
            score_details=score.details,
            config_error=config_error,
        )


def _ended(progress: GroupProgress) -> int:
    """Members that ended by themselves (not cut)."""
    return sum(1 for m in progress.members if m.result is not None and m.result.cut is None)


def _cut(inp: GroupInput, m: MemberState, why: Cut, *, started: float) -> EpisodeResult:
    """A member cut while it ran (its session closed): `cancelled`, with its turns."""
    return member_result(
        inp.group_workflow_id,
        inp.spec,
        inp.task.id,
        m,
        termination="cancelled",
        error=f"cut by its group ({why})",
        duration_s=max(0.0, time.time() - started),
        cut=why,
    )


def _restored(details: Any, samples: int) -> GroupProgress:
    """The last heartbeat of a lost attempt, or a fresh group."""
    progress = GroupProgress(members=[MemberState(sample=s) for s in range(samples)])
    if details:
        prior = GroupProgress.model_validate(details[0])
        by_sample = {m.sample: m for m in prior.members}
        progress.members = [by_sample.get(s, MemberState(sample=s)) for s in range(samples)]
    return progress


def _too_big(record: GroupRecord) -> ApplicationError:
    """The group outgrew its record: a configuration error, one line, not retried."""
    e = record.error()
    log.warning("%s", e)
    return ApplicationError(
        str(e),
        type=spec_error_type(e),
        non_retryable=True,
        category=ApplicationErrorCategory.BENIGN,
    )


async def _beat(record: GroupRecord) -> None:
    """Beat with every member's turns so far: the loss signal, and the record a retry
    restores from (the SDK sends the latest details at most every 0.8 x timeout).
    A record past its bound is not sent: the group stops (`GroupRecord.over`)."""
    timeout = activity.info().heartbeat_timeout
    interval = max(0.2, timeout.total_seconds() / 3) if timeout else 5.0
    while record.fits():
        activity.heartbeat(record.progress)
        await asyncio.sleep(interval)


@activity.defn(name=contract.AWAIT_GROUP)
async def await_group(workflow_id: str) -> GroupResult:
    """A re-run batch workflow's group that already exists: its result (a workflow
    cannot await a workflow it did not start). Beats while it waits."""
    return await await_workflow(workflow_id, GroupResult, "group")
