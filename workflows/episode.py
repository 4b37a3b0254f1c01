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

The first run provisions and drives in one `provision_and_drive` activity on the
shared queue (activities/fused.py): no workflow task nor activity between the two.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, is_cancelled_exception

from workflows.base import EpisodeBase
from workflows.failures import (
    backstop_message,
    beaten_session,
    failure_message,
    is_backstop_timeout,
    is_worker_lost,
    last_heartbeat_turn,
    lost_message,
    provision_failure,
)
from workflows.turn import TurnBackstop, WorkerLost, execute_turn

with workflow.unsafe.imports_passed_through():
    from episodes import contract
    from episodes.types.io import (
        DriveInput,
        DriveResult,
        EpisodeCarry,
        EpisodeInput,
        ProvisionAndDriveInput,
        ProvisionAndDriveResult,
        SessionRef,
        SessionTurns,
        TurnInput,
    )
    from episodes.types.results import EpisodeResult, ScoreResult, TurnResult


# The drive's result carries its last turns and the drive releases the session (issue 13).
FOLD_END_PATCH = "drive-folds-episode-end"
# Histories from before it: `provision`, a workflow task, then `drive` on the session's
# queue; now one `provision_and_drive` activity (a first run, not turn_mode: activity).
FUSED_PATCH = "provision-and-drive"


@workflow.defn(name=contract.EPISODE_WORKFLOW)
class EpisodeWorkflow(EpisodeBase):
    def __init__(self) -> None:
        super().__init__()
        self._turns_per_run = 0
        self._driving = False
        self._lost_at_turn: int | None = None  # the lost drive's last heartbeat
        self._released = False  # the drive released the session at its normal end

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
        drive: DriveResult | None = None  # the first run's, from provision_and_drive
        try:
            if carry is None:
                if inp.spec.turn_mode != "activity" and self._fuses():
                    error, drive = await self._provision_and_drive(inp)
                else:
                    error = await self._provision_or_outcome(inp)
            while self._ref is not None or drive is not None:
                self._status = "running"
                self._set_details()
                if drive is None:
                    drive = await self._drive(inp)
                paused = drive.termination is None
                self._termination, error, score = drive.termination, drive.error, drive.score
                if drive.termination != "worker_lost" or not self._may_restart(inp):
                    break
                # on_worker_lost: restart: replay the recorded turns on a new session.
                self._termination = None
                error = await self._restore(inp, self._lost_at_turn)
                drive = None
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

    # -- the turns, recorded by the drive ------------------------------------------

    @workflow.update(name=contract.RECORD_TURNS)
    def record_turns(self, results: list[TurnResult]) -> bool:
        """Record finished turns (repeats are ignored); False asks the drive to pause."""
        return self._record(results)

    def _record(self, results: list[TurnResult]) -> bool:
        for result in results:
            if result.record.turn == self._turns_done:
                self._turns.append(result.record)
        if self._status == "provisioning":
            self._status = "running"  # provision_and_drive: its session is open
        self._set_details()
        return not (
            len(self._turns) >= self._turns_per_run
            or workflow.info().is_continue_as_new_suggested()
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

    @workflow.update(name=contract.RECORD_SESSION_TURNS)
    def record_session_turns(self, batch: SessionTurns) -> bool:
        """`record_turns` from `provision_and_drive`, with its session: known here from
        its first Update on (a cancelled episode releases it, as a `drive`'s)."""
        if self._ref is None:
            self._ref, self._opened = batch.session, True
        return self._record(batch.turns)

    @record_session_turns.validator
    def _check_session_turns(self, batch: SessionTurns) -> None:
        self._check_turns(batch.turns)

    async def _drive(self, inp: EpisodeInput) -> DriveResult:
        """Run the turns (and the score) on the session's worker, from the next turn on."""
        if inp.spec.turn_mode == "activity":
            return await self._turn_activities(inp)
        assert self._ref is not None
        ref, spec = self._ref, inp.spec
        first = self._turns_done
        lost = timedelta(seconds=spec.worker_lost_timeout_s)
        backstop = timedelta(seconds=self._backstop_s(inp))
        # Histories from before it: a final Update, and a `release` activity after the drive.
        fold = workflow.patched(FOLD_END_PATCH)
        self._driving = True
        try:
            result = await workflow.execute_activity(
                contract.drive,
                self._drive_input(inp, ref.session_id, fold),
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
            result = self._drive_failed(e, ref, "drive", backstop.total_seconds())
        finally:
            self._driving = False
        return await self._drove(result)

    def _fuses(self) -> bool:
        """Provision and drive in one activity (a first run, not turn_mode: activity)."""
        return workflow.patched(FUSED_PATCH)

    async def _provision_and_drive(
        self, inp: EpisodeInput
    ) -> tuple[str | None, DriveResult | None]:
        """The first run's `provision_and_drive`: the provision's outcome error (as
        `_provision_or_outcome`'s) and the drive's result; no result: drive on with
        `drive` (`_ref` set), or nothing to drive (`_ref` None, the outcome set)."""
        spec = inp.spec
        backstop_s = self._backstop_s(inp)
        failed: ActivityError | None = None
        self._driving = True
        try:
            run: ProvisionAndDriveResult = await workflow.execute_activity(
                contract.provision_and_drive,
                ProvisionAndDriveInput(
                    provision=self._provision_input(inp),
                    drive=self._drive_input(inp, "", fold=True),
                ),
                start_to_close_timeout=timedelta(
                    seconds=self._provision_budget_s(inp) + backstop_s
                ),
                # The provision beats while its box starts, the drive through its turns.
                heartbeat_timeout=timedelta(seconds=spec.worker_lost_timeout_s),
                retry_policy=RetryPolicy(
                    maximum_attempts=3,
                    initial_interval=timedelta(seconds=1),
                    # Its timeouts are not retried (with the session open, another
                    # worker would open a second one): they are handled below.
                    non_retryable_error_types=[
                        *contract.NON_RETRYABLE_PROVISION,
                        *contract.TIMEOUTS_NOT_RETRIED,
                        contract.SESSION_NOT_FOUND,
                        contract.TURN_OUT_OF_ORDER,
                    ],
                ),
                summary=f"provision {inp.task.id} and drive (max {spec.max_turns} turns)",
            )
        except ActivityError as e:
            if is_cancelled_exception(e):
                raise  # the episode was cancelled (run() ends it)
            failed = e
        finally:
            self._driving = False
        if failed is not None:
            return await self._provision_and_drive_failed(inp, failed, backstop_s)
        self._ref, self._opened = run.session, True
        if run.drive is None:
            await workflow.wait_condition(workflow.all_handlers_finished)
            return None, None  # the drive failed retryably: `drive` goes on from here
        return None, await self._drove(run.drive)

    async def _provision_and_drive_failed(
        self, inp: EpisodeInput, e: ActivityError, backstop_s: float
    ) -> tuple[str | None, DriveResult | None]:
        await workflow.wait_condition(workflow.all_handlers_finished)
        ref = beaten_session(e) or self._ref  # its heartbeats', or its first Update's
        if ref is not None:  # the session was open: as a drive's failure
            self._ref, self._opened = ref, True
            return None, self._drive_failed(e, ref, "provision and drive", backstop_s)
        kind = provision_failure(e)
        if kind is not None:  # the harness failed to start: the episode's outcome
            self._termination = kind
            return failure_message(e), None
        if self._turns_done:  # lost after turns were recorded, its session unnamed
            return None, DriveResult(
                termination="worker_lost", error=failure_message(e), next_turn=0
            )
        # Failed before a session was open (lost, timed out, its retries spent): the
        # `provision` activity as before, with its retries and its failure (a batch
        # runs an episode whose provision failed again).
        return await self._provision_or_outcome(inp), None

    def _backstop_s(self, inp: EpisodeInput) -> float:
        """The drive's start-to-close: the harness enforces turn_timeout_s on each turn."""
        spec = inp.spec
        per_turn = spec.turn_timeout_s + 2 * spec.harness.stop_timeout_s + 30
        return (spec.max_turns - self._turns_done) * per_turn + spec.score_timeout_s

    def _drive_input(self, inp: EpisodeInput, session_id: str, fold: bool) -> DriveInput:
        info = workflow.info()
        return DriveInput(
            session_id=session_id,
            workflow_id=info.workflow_id,
            run_id=info.run_id,
            first_turn=self._turns_done,
            max_turns=inp.spec.max_turns,
            result_turns=fold,
            release=fold,
        )

    def _drive_failed(
        self, e: ActivityError, ref: SessionRef, what: str, backstop_s: float
    ) -> DriveResult:
        first = self._turns_done
        if is_worker_lost(e):
            self._lost_at_turn = last_heartbeat_turn(e)
            return DriveResult(
                termination="worker_lost", error=lost_message(e, ref), next_turn=first
            )
        if is_backstop_timeout(e):
            # A live worker ran the drive past its backstop: the turn loop is stuck
            # (the harness's turn timeout did not fire). An outcome, not a lost
            # worker: the recorded turns are scored here, the session released.
            self._score_recorded = True
            return DriveResult(
                termination="turn_timeout",
                error=backstop_message(e, what, backstop_s),
                next_turn=first,
            )
        raise e

    async def _drove(self, result: DriveResult) -> DriveResult:
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
            if len(self._turns) >= self._turns_per_run or (
                workflow.info().is_continue_as_new_suggested()
            ):
                return DriveResult(next_turn=n)  # paused: the next run turns on
            try:
                result = await execute_turn(
                    ref, spec, TurnInput(session_id=ref.session_id, turn=n), f"turn {n}"
                )
            except WorkerLost as e:
                self._lost_at_turn = n
                return DriveResult(termination="worker_lost", error=str(e), next_turn=n)
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
