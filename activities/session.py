"""The activities of one episode, thin over `episodes.session.live.LiveSession`.

`provision` runs on the shared queue on whichever worker takes it and registers
the session there; `drive` (the turn loop and the score), `turn` and `score` (an
interactive session's steps) and `release` run on that worker's own queue.
`score_transcript` is the fallback when that worker is gone (a local activity).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import OrderedDict
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities import telemetry
from activities.box_wait import beat_box_wait, box_wait_s
from activities.fleet_wait import wait_for_fleet
from activities.logs import bind
from activities.outcomes import (
    as_outcome,
    box_lost,
    cancel_is_a_cancel,
    heartbeat_until_cancelled,
    opened,
    out_of_order,
    spec_error_type,
    worker_fault,
)
from activities.recorder import TurnRecorder
from episodes import contract
from episodes.breaker import ProvisionBreaker
from episodes.envs import load_env
from episodes.errors import BoxGone, BoxLost, EnvironmentFailed, SpecError, TurnOutOfOrder
from episodes.runtimes.pool.worker_pools import WorkerPools
from episodes.session.drive import RunAhead, TurnLoop
from episodes.session.live import LiveSession, score_transcript
from episodes.session.registry import SessionRegistry
from episodes.truncate import HISTORY_TURN_LIMIT
from episodes.types.io import (
    DriveInput,
    DriveResult,
    ProvisionInput,
    ReleaseInput,
    RestoreInput,
    RestoreResult,
    ScoreInput,
    ScoreTranscriptInput,
    SessionRef,
    TurnInput,
)
from episodes.types.results import ScoreResult, Task, TurnResult
from episodes.types.spec import EpisodeSpec

log = logging.getLogger("episodes.activities")
_ENDED_KEPT = 4096
__all__ = ["SessionActivities", "score_transcript_activity", "spec_error_type"]


class SessionActivities:
    def __init__(
        self,
        registry: SessionRegistry,
        *,
        session_queue: str,
        worker_id: str,
        pools: WorkerPools | None = None,
        history_limit_bytes: int | None = HISTORY_TURN_LIMIT,
        breaker: ProvisionBreaker | None = None,
    ) -> None:
        """`history_limit_bytes`: None when the worker's converter stores large payloads
        externally (turns are recorded whole); else what one turn may take inline."""
        self.registry = registry
        self.history_limit_bytes = history_limit_bytes
        self.session_queue = session_queue
        self.worker_id = worker_id
        self.pools = pools
        # Told of every provision: a run of failures of this worker's own pauses its
        # provisions (the slot supplier reads it).
        self.breaker = breaker
        # The results of drives that released their session, for their retries.
        self._ended: OrderedDict[str, DriveResult] = OrderedDict()
        # Sessions turning on between a paused drive and the next run's.
        self._ahead = RunAhead()

    @activity.defn(name=contract.PROVISION)
    async def provision(self, inp: ProvisionInput) -> SessionRef:
        await wait_for_fleet()  # a provision taken just as the model fleet filled
        # A box and a harness can take a while to start: beat, so a worker killed
        # mid-provision is noticed after the heartbeat timeout, not the start-to-close.
        # While it waits for room under the worker's box caps its beats say so.
        session: LiveSession | None = None

        def details() -> str | None:
            return contract.BOX_WAIT if session is not None and session.box_waiting else None

        beat = asyncio.create_task(heartbeat_until_cancelled(details, eager=False))
        try:
            pool = warm = None
            if self.pools is not None:
                if inp.spec.reuse_key:
                    pool = await self.pools.get(inp.spec.pool)
                warm = self.pools.warm_boxes(inp.spec.pool)
            session = self._new_session(
                inp.spec, inp.task, inp.sample, inp.workflow_id, pool, warm, waits=True
            )
            with cancel_is_a_cancel("provision", None):
                first = await opened(session)
        except BaseException as e:
            if self.breaker is not None and worker_fault(e):
                self.breaker.failure(e)
            raise
        finally:
            beat.cancel()
        if self.breaker is not None:
            self.breaker.success()
        self.registry.add(session, inp.workflow_id, inp.run_id, waits_s=_waits(inp))
        telemetry.PROVISIONS.labels(outcome="ok").inc()
        if session.pool_hit is not None:
            telemetry.POOL_LEASES.labels(result="hit" if session.pool_hit else "miss").inc()
        log.info("provisioned session %s on %s", session.session_id, self.worker_id)
        return self._ref(session, first)

    @activity.defn(name=contract.RESTORE)
    async def restore(self, inp: RestoreInput) -> RestoreResult:
        """A new session for an episode whose worker was lost: open it (a fresh box and
        harness, env.reset) and replay the first `inp.turns` recorded turns into it."""
        from episodes.client.histories.transcript import recorded_turns

        # Beat from the start: a long history and a new box (a container, the harness's
        # ready) can take longer than the heartbeat timeout, and a restore that never
        # beats in time would time out on every attempt.
        beat = asyncio.create_task(heartbeat_until_cancelled())
        try:
            source = inp.source_workflow_id or inp.workflow_id  # a fork's: its parent's
            records = await recorded_turns(activity.client(), source, inp.turns)
            warm = self.pools.warm_boxes(inp.spec.pool) if self.pools is not None else None
            session = self._new_session(inp.spec, inp.task, inp.sample, inp.workflow_id, warm=warm)
            first = await opened(session)
            if inp.source_workflow_id is None:
                telemetry.record_restart(inp.lost)
            try:
                divergent, resumed = await session.restore(records)
            except BaseException as e:
                await session.close(failed=True)
                raise as_outcome(e, session) from None
        finally:
            beat.cancel()
        self.registry.add(session, inp.workflow_id, inp.run_id, waits_s=_waits(inp))
        if divergent:
            activity.logger.warning(
                "restore of %s: replies differ from the record at turns %s",
                inp.workflow_id,
                divergent[:20],
            )
        return RestoreResult(
            session=self._ref(session, first),
            turns_replayed=len(records),
            divergent_turns=divergent[:20],
            divergences=len(divergent),
            resumed=resumed,
        )

    def _new_session(
        self,
        spec: EpisodeSpec,
        task: Task,
        sample: int,
        workflow_id: str,
        pool: Any = None,
        warm: Any = None,
        *,
        waits: bool = False,
    ) -> LiveSession:
        """`waits`: a provision's, whose wait for room under the box caps is marked."""
        session_id = f"{workflow_id}:{uuid.uuid4().hex[:10]}"
        bind(workflow_id=workflow_id, session_id=session_id)
        return LiveSession(
            spec,
            task,
            sample,
            session_id,
            pool=pool,
            warm=warm,
            caps=self.pools.caps if self.pools is not None else None,
            on_box_wait=beat_box_wait if waits else None,
            box_wait_s=box_wait_s(spec),
            labels={"worker": self.worker_id, "workflow": workflow_id},
            history_limit_bytes=self.history_limit_bytes,
        )

    def _ref(self, session: LiveSession, first: Any) -> SessionRef:
        return SessionRef(
            session_id=session.session_id,
            task_queue=self.session_queue,
            worker_id=self.worker_id,
            first_message=first,
            pool_hit=session.pool_hit,
            runtime=session.runtime_type,
        )

    def _session(self, session_id: str) -> LiveSession:
        session = self.registry.get(session_id)
        if session is None:
            raise ApplicationError(
                f"session {session_id} is not on worker {self.worker_id} "
                "(the worker restarted or the session was reaped)",
                type=contract.SESSION_NOT_FOUND,
                non_retryable=True,
            )
        return session

    @activity.defn(name=contract.TURN)
    async def turn(self, inp: TurnInput) -> TurnResult:
        bind(session_id=inp.session_id, turn=inp.turn)
        session = self._session(inp.session_id)
        beat = asyncio.create_task(heartbeat_until_cancelled())
        try:
            override = {"message": inp.message} if inp.has_message else {}
            with self.registry.in_use(inp.session_id), cancel_is_a_cancel("turn", session):
                result = await session.turn(inp.turn, **override)
            _observe_turn(result)
            return result
        except TurnOutOfOrder as e:
            raise out_of_order(e) from None
        except BoxLost as e:
            await self._drop(inp.session_id, e)
            raise box_lost(e) from None
        finally:
            beat.cancel()

    @activity.defn(name=contract.DRIVE)
    async def drive(self, inp: DriveInput) -> DriveResult:
        """Turn from `first_turn` until the env is done, `max_turns`, or the workflow asks
        to pause (it continues-as-new); record the turns in it; score unless paused.
        The loop is `episodes.session.drive.TurnLoop`; this adapts it to Temporal.

        A retried drive starts again at `first_turn`: the session answers the turns it
        already ran from its record, unsent, and the workflow ignores what it holds.
        """
        bind(workflow_id=inp.workflow_id, session_id=inp.session_id)
        ended = self._ended.get(inp.session_id)
        if ended is not None:
            return ended  # a retried drive whose first attempt released the session
        session = self._session(inp.session_id)
        self._ahead.stop(inp.session_id)  # its turns are in the session's record
        # The reaper checks the run that drives the session (a long episode's latest).
        self.registry.follow(inp.session_id, inp.run_id)
        handle = activity.client().get_workflow_handle(inp.workflow_id, run_id=inp.run_id)
        recorder = TurnRecorder(
            handle, inp.session_id, max_update_bytes=inp.max_update_bytes, linger_s=inp.linger_s
        )
        loop = _ObservedLoop(
            session,
            recorder,
            first_turn=inp.first_turn,
            max_turns=inp.max_turns,
            pipeline=inp.pipeline,
            max_lag_s=inp.max_lag_s,
            result_turns=inp.result_turns,
        )

        async def release(ended: DriveResult) -> None:
            await self._release_ended(inp.session_id, ended)

        # Heartbeats go on through long turns and the score: their silence is the loss
        # signal. Their details (the turn in progress) show in the UI's pending activity.
        beat = asyncio.create_task(heartbeat_until_cancelled(lambda: {"turn": loop.next_turn}))
        try:
            # Busy for the reaper while the drive runs, between turns too (the recorder).
            with self.registry.in_use(inp.session_id), cancel_is_a_cancel("drive", session):
                result = await loop.run(release=release if inp.release else None, ahead=self._ahead)
        except TurnOutOfOrder as e:
            raise out_of_order(e) from None
        except BoxLost as e:
            await self._drop(inp.session_id, e)
            raise box_lost(e) from None
        finally:
            beat.cancel()
            recorder.close()
        if result.termination is not None:
            telemetry.TERMINATIONS.labels(kind=result.termination).inc()
            log.info("episode ended %s after %d turns", result.termination, result.next_turn)
        return result

    async def _drop(self, session_id: str, e: BoxLost) -> None:
        """The session's box died under it: stop what is left (its harness, services and
        the box's remains); the workflow goes on with a fresh session elsewhere."""
        telemetry.BOX_FAILOVERS.inc()
        log.warning("session %s lost its box: %s", session_id, str(e).splitlines()[0])
        self._ahead.stop(session_id)
        session = self.registry.pop(session_id)
        if session is not None:
            await session.close(failed=True)

    async def _release_ended(self, session_id: str, ended: DriveResult) -> None:
        """The drive's normal end releases the session; a retry of the same drive (its
        completion was lost) gets the same result from `_ended`."""
        self._ended[session_id] = ended
        while len(self._ended) > _ENDED_KEPT:
            self._ended.popitem(last=False)
        session = self.registry.pop(session_id)
        if session is not None:
            await session.close()
            log.info("released session %s", session_id)

    @activity.defn(name=contract.SCORE)
    async def score(self, inp: ScoreInput) -> ScoreResult:
        bind(session_id=inp.session_id)
        session = self._session(inp.session_id)
        try:
            with self.registry.in_use(inp.session_id):
                result = await session.score(inp.termination)
        except EnvironmentFailed as e:
            raise as_outcome(e, session) from None  # env_error: the workflow's outcome
        if inp.termination is not None:
            telemetry.TERMINATIONS.labels(kind=inp.termination).inc()
        return result

    @activity.defn(name=contract.RELEASE)
    async def release(self, inp: ReleaseInput) -> None:
        bind(session_id=inp.session_id)
        self._ahead.stop(inp.session_id)
        session = self.registry.pop(inp.session_id)
        if session is not None:
            await session.close()
            log.info("released session %s", inp.session_id)


def _waits(inp: ProvisionInput | RestoreInput) -> float:
    """How long the session may sit untouched by its workflow: a turn, or a pause
    between an interactive session's steps."""
    return max(inp.spec.turn_timeout_s, inp.idle_timeout_s or 0.0)


@activity.defn(name=contract.SCORE_TRANSCRIPT)
async def score_transcript_activity(inp: ScoreTranscriptInput) -> ScoreResult:
    try:
        env = load_env(inp.env, inp.env_args)
    except SpecError as e:
        raise ApplicationError(str(e), type=spec_error_type(e), non_retryable=True) from None
    transcript = inp.transcript
    if inp.workflow_id is not None and inp.earlier_turns:
        # A continued run: the earlier runs' turns are in their histories, not the input.
        from episodes.client.histories.transcript import recorded_turns

        earlier = await recorded_turns(activity.client(), inp.workflow_id, inp.earlier_turns)
        transcript = transcript.model_copy(update={"turns": [*earlier, *transcript.turns]})
    try:
        return await score_transcript(env, transcript)
    except EnvironmentFailed as e:
        if isinstance(e.__cause__, BoxGone):
            # Away from its session (the worker was lost) an env that grades its box
            # cannot score: the episode keeps its named outcome (worker_lost), unscored.
            return ScoreResult(details={"error": str(e).splitlines()[0]})
        # The episode's outcome (env_error), not a retry: the same env would raise again.
        raise ApplicationError(str(e), type=contract.ENV_ERROR, non_retryable=True) from None


class _ObservedLoop(TurnLoop):
    """The drive's loop with the worker's log context and turn metrics."""

    def starting(self, n: int) -> None:
        bind(turn=n)

    def finished(self, result: TurnResult) -> None:
        _observe_turn(result)


def _observe_turn(result: TurnResult) -> None:
    telemetry.TURN_SECONDS.observe(result.record.duration_ms / 1000)
    log.debug("turn %d: %.1f ms", result.record.turn, result.record.duration_ms)
