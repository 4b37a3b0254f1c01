"""EpisodeWorkflow: provision -> drive (turn x N, score) -> release.

Deterministic: no I/O, clocks or randomness outside Temporal's APIs; only models
are imported. The live harness sits in one worker's memory, so every activity after
`provision` goes to that worker's own task queue (`SessionRef.task_queue`).

The turn loop runs on that worker as one long `drive` activity: it sends turn after
turn to the live session and records the finished ones here with `record_turns`
Updates (batches, at most `DriveInput.max_lag_s` / `pipeline` turns behind the harness), so a turn
costs what the harness costs, not two Temporal round trips. The drive's heartbeat
timeout is the worker-loss bound. A long episode continues-as-new between drives
(the server suggests it, or `turns_per_run`), keeping its live session and counters.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, is_cancelled_exception

from workflows.base import EpisodeBase
from workflows.failures import (
    BOX_FAILOVER_PATCH,
    backstop_message,
    failure_message,
    is_backstop_timeout,
    is_box_lost,
    is_worker_lost,
    last_heartbeat_turn,
    lost_message,
)
from workflows.turn import BoxLostTurn, TurnBackstop, WorkerLost, execute_turn

with workflow.unsafe.imports_passed_through():
    from episodes import contract
    from episodes.types.io import DriveInput, DriveResult, EpisodeCarry, EpisodeInput, TurnInput
    from episodes.types.results import EpisodeResult, ScoreResult, TurnResult


# The drive's result carries its last turns and the drive releases the session (issue 13).
FOLD_END_PATCH = "drive-folds-episode-end"
# A fork's branch opens by replaying its parent's turns (a `restore` of the parent's
# history) instead of a `provision`; inputs from before forks never name one.
FORK_PATCH = "fork-replays-parent"
# A `park` signal pauses the drive, releases the session and waits for `resume` (or
# `max_parked_s`), then replays the recorded turns on a new session; histories from
# before it never received one.
PARK_PATCH = "park-and-resume"
# A `resume` that reaches an episode not parked (nor parking) cancels a park not yet
# taken and is spent, instead of staying set for the next park (which then resumed at
# once: a batch resumed after a preemption could never be preempted again).
RESUME_PATCH = "resume-when-not-parked"
# A `park` that reaches an episode parked (or parking) is spent, instead of staying set
# for after the resume (the whole batch parked again right after `resume --batch`
# when `park --batch` had been repeated while it was parked).
PARK_ONCE_PATCH = "park-while-parked-is-spent"
# An episode of a batch workflow tells its batch when it parks and when it resumes
# (`episode_parked` signals: commands), so the batch counts its parked episodes;
# histories from before never sent them.
PARKED_NOTICE_PATCH = "park-tells-the-batch"


@workflow.defn(name=contract.EPISODE_WORKFLOW)
class EpisodeWorkflow(EpisodeBase):
    def __init__(self) -> None:
        super().__init__()
        self._turns_per_run = 0
        self._driving = False
        self._lost_at_turn: int | None = None  # the lost drive's last heartbeat
        self._released = False  # the drive released the session at its normal end
        self._park = False  # a `park` signal asks for the next turn boundary
        self._resume = False
        self._parking = False  # from the release of a parked session to its restore

    @workflow.run
    async def run(self, inp: EpisodeInput) -> EpisodeResult:
        spec, carry = inp.spec, inp.carry
        self._max_turns = spec.max_turns
        self._turns_per_run = inp.turns_per_run
        started = carry.started_at if carry else workflow.now()
        if carry is not None:
            self._adopt(carry)
        error: str | None = None
        score: ScoreResult | None = None
        paused = False
        try:
            if carry is None and inp.fork is not None and workflow.patched(FORK_PATCH):
                error = await self._fork_open(inp, inp.fork)
            elif carry is None:
                error = await self._provision_or_outcome(inp)
            while self._ref is not None:
                self._status = "running"
                self._set_details()
                drive = await self._drive(inp)
                paused = drive.termination is None
                self._termination, error, score = drive.termination, drive.error, drive.score
                if paused and self._park and workflow.patched(PARK_PATCH):
                    paused = False
                    error = await self._parked(inp)
                    continue  # resumed (`_ref`), or the resume failed as an outcome
                if drive.termination == "box_lost":
                    if not self._may_fail_over(inp):
                        break
                    # A fresh box (on any worker) with the recorded turns replayed.
                    self._termination = None
                    error = await self._restore(inp, None, failover=True)
                    continue
                if drive.termination != "worker_lost" or not self._may_restart(inp):
                    break
                # on_worker_lost: restart: replay the recorded turns on a new session.
                self._termination = None
                error = await self._restore(inp, self._lost_at_turn)
            if not paused:
                self._status = "scoring"
                if score is None:
                    score = await self._score(inp, error)
        except (asyncio.CancelledError, ActivityError) as e:
            # Cancelling the workflow cancels the activity it awaits; either error can surface.
            if not is_cancelled_exception(e):
                raise
            paused = False
            self._termination = "cancelled"
            error = "the episode was cancelled"
        finally:
            if (
                self._ref is not None
                and self._termination != "worker_lost"
                and not paused
                and not self._released
            ):
                self._status = "releasing"
                await self._release(self._ref)
        if paused:
            assert self._ref is not None
            # The session stays live on its worker; the next run drives on from here.
            workflow.continue_as_new(
                inp.model_copy(update={"carry": EpisodeCarry(**self._carry(started))})
            )
        return self._finish(inp, started, error, score or ScoreResult())

    # -- park and resume ------------------------------------------------------------

    @workflow.signal(name=contract.PARK)
    def park(self) -> None:
        """Release the box and harness at the next turn boundary and wait, durably. One
        parked (or parking) already: nothing to do."""
        if self._parking and workflow.patched(PARK_ONCE_PATCH):
            return
        self._park = True

    @workflow.signal(name=contract.RESUME)
    def resume(self) -> None:
        """A parked episode: a new session replays the recorded turns, then goes on. One
        not parked: a park asked and not taken yet is called off."""
        if not self._parking and workflow.patched(RESUME_PATCH):
            self._park = False
            return
        self._resume = True

    @workflow.signal(name=contract.CUT)
    def cut(self, why: str) -> None:
        """Sent by a groups stream just before it cancels the episode: the result says
        why (`EpisodeResult.cut`), and `episodes export` leaves it out. (No command: a
        history without it replays as it ran.)"""
        if why in ("straggler", "group_timeout"):
            self._cut = why  # type: ignore[assignment]

    async def _parked(self, inp: EpisodeInput) -> str | None:
        """Parked: the session released (nothing runs), until `resume` or `max_parked_s`;
        then a new session on any worker replays the recorded turns exactly (not counted
        as a restart). None, or the error of a resume that failed as an outcome."""
        assert self._ref is not None
        self._parking = True
        self._status = "releasing"
        self._set_details()
        # A cancel while it runs is raised: the run ends `cancelled` and, `_ref` still
        # set, releases the session again (a release is idempotent).
        await self._release(self._ref, parking=True)
        self._ref, self._park = None, False
        self._status = "parked"
        self._set_details()
        await self._tell_batch(parked=True)
        try:
            await workflow.wait_condition(
                lambda: self._resume, timeout=timedelta(seconds=inp.spec.max_parked_s)
            )
        except TimeoutError:
            pass  # parked long enough: it resumes by itself
        self._resume = self._parking = False
        await self._tell_batch(parked=False)
        return await self._restore(inp, None, count=False)

    async def _tell_batch(self, *, parked: bool) -> None:
        """The batch workflow that started this episode (its parent), if any, counts it
        parked or not (`episode_parked`); a batch gone meanwhile is nothing to fail on."""
        info = workflow.info()
        if info.parent is None or not workflow.patched(PARKED_NOTICE_PATCH):
            return
        batch = workflow.get_external_workflow_handle(info.parent.workflow_id)
        try:
            await batch.signal(contract.EPISODE_PARKED, args=[info.workflow_id, parked])
        except Exception as e:  # the batch closed: nobody to tell
            workflow.logger.info("could not tell batch %s: %s", info.parent.workflow_id, e)

    # -- the turns, recorded by the drive ------------------------------------------

    @workflow.update(name=contract.RECORD_TURNS)
    def record_turns(self, results: list[TurnResult]) -> bool:
        """Record finished turns (repeats are ignored); False asks the drive to pause."""
        for result in results:
            if result.record.turn == self._turns_done:
                self._turns.append(result.record)
        self._set_details()
        return not (
            len(self._turns) >= self._turns_per_run
            or workflow.info().is_continue_as_new_suggested()
            or self._park
        )

    @record_turns.validator
    def _check_turns(self, results: list[TurnResult]) -> None:
        if not self._driving:
            raise _turns_rejected("no drive is running")
        if not results:
            raise _turns_rejected("no turns to record")
        first, last = results[0].record.turn, results[-1].record.turn
        if first > self._turns_done:
            raise _turns_rejected(f"turn {first} recorded before turn {self._turns_done}")
        if last < self._turns_done:
            # A retried drive replaying its session's record: nothing new to write.
            raise ApplicationError(
                f"turns {first}-{last} are recorded", type=contract.TURNS_ALREADY_RECORDED
            )

    async def _drive(self, inp: EpisodeInput) -> DriveResult:
        """Run the turns (and the score) on the session's worker, from the next turn on."""
        if inp.spec.turn_mode == "activity":
            return await self._turn_activities(inp)
        assert self._ref is not None
        ref, spec, info = self._ref, inp.spec, workflow.info()
        first = self._turns_done
        lost = timedelta(seconds=spec.worker_lost_timeout_s)
        per_turn = spec.turn_timeout_s + 2 * spec.harness.stop_timeout_s + 30
        backstop = timedelta(seconds=(spec.max_turns - first) * per_turn + spec.score_timeout_s)
        # Histories from before it: a final Update, and a `release` activity after the drive.
        fold = workflow.patched(FOLD_END_PATCH)
        self._driving = True
        try:
            result = await workflow.execute_activity(
                contract.drive,
                DriveInput(
                    session_id=ref.session_id,
                    workflow_id=info.workflow_id,
                    run_id=info.run_id,
                    first_turn=first,
                    max_turns=spec.max_turns,
                    result_turns=fold,
                    release=fold,
                ),
                task_queue=ref.task_queue,
                # A dead worker never picks the task up, or stops heartbeating: noticed
                # after `lost`, not never.
                schedule_to_start_timeout=lost,
                heartbeat_timeout=lost,
                # The harness enforces turn_timeout_s on each turn; this is the backstop.
                start_to_close_timeout=backstop,
                retry_policy=RetryPolicy(
                    maximum_attempts=5,
                    initial_interval=timedelta(milliseconds=200),
                    non_retryable_error_types=[
                        contract.SESSION_NOT_FOUND,
                        contract.TURN_OUT_OF_ORDER,
                    ],
                ),
                summary=f"drive from turn {first} (max {spec.max_turns})",
            )
        except ActivityError as e:
            if is_worker_lost(e):
                self._lost_at_turn = last_heartbeat_turn(e)
                result = DriveResult(
                    termination="worker_lost", error=lost_message(e, ref), next_turn=first
                )
            elif is_box_lost(e) and workflow.patched(BOX_FAILOVER_PATCH):
                # The worker dropped the session: nothing to release or score there.
                self._ref = None
                result = DriveResult(
                    termination="box_lost", error=failure_message(e), next_turn=first
                )
            elif is_backstop_timeout(e):
                # A live worker ran the drive past its backstop: the turn loop is stuck
                # (the harness's turn timeout did not fire). An outcome, not a lost
                # worker: the recorded turns are scored here, the session released.
                self._score_recorded = True
                result = DriveResult(
                    termination="turn_timeout",
                    error=backstop_message(e, "drive", backstop.total_seconds()),
                    next_turn=first,
                )
            else:
                raise
        finally:
            self._driving = False
        # An Update still being handled finishes before the workflow moves on.
        await workflow.wait_condition(workflow.all_handlers_finished)
        for turn in result.turns:  # the drive's last turns, after every Update's
            if turn.record.turn == self._turns_done:
                self._turns.append(turn.record)
        self._released = result.released
        return result

    async def _turn_activities(self, inp: EpisodeInput) -> DriveResult:
        """`turn_mode: activity`: one `turn` activity per turn, each recorded before the
        next starts; the same pause, loss and backstop outcomes as the drive's (the
        score is the `score` activity's, run by the caller)."""
        assert self._ref is not None
        ref, spec = self._ref, inp.spec
        while self._turns_done < spec.max_turns:
            n = self._turns_done
            if (
                len(self._turns) >= self._turns_per_run
                or workflow.info().is_continue_as_new_suggested()
                or self._park
            ):
                return DriveResult(next_turn=n)  # paused: the next run turns on
            try:
                result = await execute_turn(
                    ref, spec, TurnInput(session_id=ref.session_id, turn=n), f"turn {n}"
                )
            except WorkerLost as e:
                self._lost_at_turn = n
                return DriveResult(termination="worker_lost", error=str(e), next_turn=n)
            except BoxLostTurn as e:
                workflow.patched(BOX_FAILOVER_PATCH)  # marks the new path (see the patch)
                self._ref = None  # dropped by its worker
                return DriveResult(termination="box_lost", error=str(e), next_turn=n)
            except TurnBackstop as e:
                self._score_recorded = True
                return DriveResult(termination="turn_timeout", error=str(e), next_turn=n)
            self._turns.append(result.record)
            self._set_details()
            if result.observation.done:
                termination = result.termination or "env_done"
                return DriveResult(
                    termination=termination, error=result.record.error, next_turn=n + 1
                )
        return DriveResult(termination="max_turns", next_turn=self._turns_done)


def _turns_rejected(message: str) -> ApplicationError:
    return ApplicationError(message, type=contract.TURNS_REJECTED, non_retryable=True)
