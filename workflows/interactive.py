"""InteractiveEpisodeWorkflow: an episode whose turns the trainer writes, one Update each.

provision (as EpisodeWorkflow) -> `open` answers with the first observation ->
each `step` update runs one `turn` activity on the session's worker with the
trainer's message and answers with the reply and the env's observation ->
`close`, done, an idle timeout or a cancel -> score -> release.

A `park` signal, between two steps, releases the session and waits with no idle clock
until `resume`, the next `step` or `max_parked_s`: then a new session on any worker
replays the recorded turns exactly and the session goes on (a `close` while parked
scores the recorded transcript, with no session brought back for it).

A step's update id is its idempotency key (the client uses `<workflow id>:step:<n>`):
Temporal keeps one outcome per update id, so a retried step gets the recorded reply
and the harness sees the message once. The validator rejects a step that is out of
order, sent while another is running, or sent after the episode is over; rejected
updates leave no trace in the history.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, is_cancelled_exception

from workflows.base import EpisodeBase
from workflows.failures import BOX_FAILOVER_PATCH
from workflows.turn import BoxLostTurn, TurnBackstop, WorkerLost, execute_turn

with workflow.unsafe.imports_passed_through():
    from episodes import contract
    from episodes.types.io import (
        EpisodeInput,
        InteractiveCarry,
        InteractiveInput,
        SessionOpened,
        StepInput,
        StepReply,
        TurnInput,
    )
    from episodes.types.results import EpisodeResult, ScoreResult, TurnResult


@workflow.defn(name=contract.INTERACTIVE_WORKFLOW)
class InteractiveEpisodeWorkflow(EpisodeBase):
    """EpisodeWorkflow's provision, score, release and `progress` query (EpisodeBase); its
    turns are one `turn` activity per step (the trainer waits on each), not a drive."""

    @workflow.init
    def __init__(self, inp: InteractiveInput) -> None:
        super().__init__()
        self._next = 0  # the index the next step must carry
        self._stepping = 0  # steps in flight (0 or 1: the validator allows one)
        self._wake = 0  # bumped on every step start/end and close: resets the idle clock
        self._closing = False
        self._error: str | None = None
        self._fatal: BaseException | None = None
        self._result: EpisodeResult | None = None
        self._inp: InteractiveInput | None = None
        # The last answered step and its update id: a continued run answers a retry of it.
        self._last_step: StepReply | None = None
        self._last_step_id: str | None = None
        self._carried: tuple[StepReply, str] | None = None
        self._park = False  # a `park` signal asks for the next step boundary
        self._resume = False
        self._parking = False  # from the release of a parked session to its restore
        self._first_observation: Any = None  # what `open` answers while parked
        self._inp = inp
        carry = inp.carry
        if carry is not None:
            # Before any handler runs: a step may be the new run's first event.
            self._adopt(carry)
            self._status = "running"
            self._max_turns = inp.spec.max_turns
            self._next = self._turns_done
            if carry.last_step is not None and carry.last_step_id is not None:
                self._carried = (carry.last_step, carry.last_step_id)

    @workflow.run
    async def run(self, inp: InteractiveInput) -> EpisodeResult:
        self._inp = inp
        self._max_turns = inp.spec.max_turns
        carry = inp.carry
        started = carry.started_at if carry else workflow.now()
        score = ScoreResult()
        paused = False
        try:
            if carry is None:
                self._error = await self._provision_or_outcome(inp)
            if self._ref is not None:
                self._status = "running"
                self._set_details()
                paused = await self._serve(inp)
            if not paused:
                self._status = "scoring"
                score = await self._score(inp, self._error)
        except (asyncio.CancelledError, ActivityError) as e:
            if not is_cancelled_exception(e):
                raise
            paused = False
            self._termination = "cancelled"
            self._error = "the session was cancelled"
        finally:
            if self._ref is not None and self._termination != "worker_lost" and not paused:
                self._status = "releasing"
                await self._release(self._ref)
        if paused:
            # The session stays live on its worker; the next run takes the next step. No
            # step is running (`_serve` checked, with no await since) and no close came.
            workflow.continue_as_new(
                inp.model_copy(
                    update={
                        "carry": InteractiveCarry(
                            **self._carry(started),
                            last_step=self._last_step,
                            last_step_id=self._last_step_id,
                        )
                    }
                )
            )
        self._result = self._finish(inp, started, self._error, score)
        # `close` and a late `open` answer from the result: let them before completing.
        await workflow.wait_condition(workflow.all_handlers_finished)
        return self._result

    async def _serve(self, inp: InteractiveInput) -> bool:
        """Wait for steps until the episode is over, the trainer closes it, or it idles
        out (False); True: continue-as-new between two steps (history size or
        `turns_per_run`), the session staying live."""
        idle = timedelta(seconds=inp.idle_timeout_s)
        while True:
            if self._stepping == 0:
                if self._fatal is not None:
                    raise self._fatal
                if self._termination is not None:
                    return False
                if self._closing:
                    self._termination = "closed"
                    self._error = (
                        f"closed by the trainer after {self._turns_done} turns, "
                        "before the env was done"
                    )
                    return False
                if self._park and workflow.patched(INTERACTIVE_PARK_PATCH):
                    await self._parked(inp)
                    if self._termination is not None:
                        return False  # the resume failed as an outcome
                    continue  # resumed: the idle clock starts again
                if (
                    len(self._turns) >= inp.turns_per_run
                    or workflow.info().is_continue_as_new_suggested()
                ) and workflow.patched(INTERACTIVE_CAN_PATCH):
                    return True
            try:
                await workflow.wait_condition(
                    self._woken_since(self._wake),
                    timeout=idle,
                    timeout_summary="idle timeout",
                )
            except TimeoutError:  # the builtin: wait_condition's timeout
                if self._stepping == 0:  # a long turn is not idleness
                    self._termination = "idle_timeout"
                    self._error = f"no step arrived for {inp.idle_timeout_s:g} s"
                    return False

    # -- park and resume --------------------------------------------------------------

    @workflow.signal(name=contract.PARK)
    def park(self) -> None:
        """Release the box and harness once no step runs, and wait (no idle clock)."""
        if not self._parking:  # parked already: nothing to do
            self._park = True
            self._wake += 1

    @workflow.signal(name=contract.RESUME)
    def resume(self) -> None:
        """A parked session: a new session replays the recorded turns, then waits for the
        next step. One not parked: a park asked and not taken yet is called off."""
        if self._parking:
            self._resume = True
        else:
            self._park = False

    async def _parked(self, inp: InteractiveInput) -> None:
        """Parked: the session released (nothing runs), until `resume`, a step, a close or
        `max_parked_s`; then (but after a close) a new session on any worker replays the
        recorded turns exactly, not counted as a restart. A failed resume is the
        session's outcome (`_termination`, `_error`)."""
        assert self._ref is not None
        self._parking = True
        self._first_observation = self._ref.first_message
        self._status = "releasing"
        self._set_details()
        # A cancel while it runs is raised: the run ends `cancelled` and, `_ref` still
        # set, releases the session again (a release is idempotent).
        await self._release(self._ref, parking=True)
        self._ref, self._park = None, False
        self._status = "parked"
        self._set_details()
        try:
            await workflow.wait_condition(
                lambda: self._resume or self._stepping > 0 or self._closing,
                timeout=timedelta(seconds=inp.spec.max_parked_s),
                timeout_summary="max_parked_s",
            )
        except TimeoutError:
            pass  # parked long enough: it resumes by itself
        self._resume = False
        if self._closing and self._stepping == 0:
            self._parking = False  # closed while parked: the record is scored as it is
            return
        self._error = await self._restore(inp, None, count=False)
        self._parking = False

    async def _unparked(self, n: int) -> StepReply | None:
        """A step sent to a parked session waits for its resume (which it asks for);
        None once a session is back, or the answer that the session ended."""
        if not self._parking:
            return None
        await workflow.wait_condition(lambda: not self._parking or self._status == "done")
        if self._ref is not None and self._status == "running":
            return None
        why = self._termination or "cancelled"
        return StepReply(turn=n, done=True, termination=why, error=self._error)

    def _idle_timeout_s(self, inp: EpisodeInput) -> float | None:
        assert isinstance(inp, InteractiveInput)
        return inp.idle_timeout_s

    def _woken_since(self, seen: int) -> Callable[[], bool]:
        """True once a step starts or ends or a close arrives after `seen` was read."""
        return lambda: self._wake != seen

    # -- updates -----------------------------------------------------------------------

    @workflow.update(name=contract.OPEN)
    async def open(self) -> SessionOpened:
        """The first observation once provisioned (or the failure that ended the session)."""
        await workflow.wait_condition(lambda: self._status != "provisioning")
        live = self._status in ("running", "restoring") or self._parking
        return SessionOpened(
            first_observation=self._ref.first_message if self._ref else self._first_observation,
            turns_done=self._turns_done,
            done=self._termination is not None or not live,
            termination=self._termination,
            error=self._error,
        )

    @workflow.update(name=contract.STEP)
    async def step(self, inp: StepInput) -> StepReply:
        if self._is_carried_retry(inp):
            assert self._carried is not None
            return self._carried[0]  # answered by the run before this one
        # The validator and this prefix run with no await between them, so two steps
        # racing for the same index cannot both pass.
        n = inp.turn
        self._next = n + 1
        self._stepping += 1
        self._wake += 1
        try:
            reply = await self._unparked(n)
            if reply is None:
                reply = await self._step(n, inp)
            info = workflow.current_update_info()
            self._last_step, self._last_step_id = reply, info.id if info else None
            return reply
        finally:
            self._stepping -= 1
            self._wake += 1

    def _is_carried_retry(self, inp: StepInput) -> bool:
        """A retry (same update id) of the step the previous run answered last: Temporal
        remembers update ids per run, so the chain does it for that step."""
        info = workflow.current_update_info()
        return (
            self._carried is not None
            and inp.turn == self._carried[0].turn
            and info is not None
            and info.id == self._carried[1]
        )

    @step.validator
    def _validate_step(self, inp: StepInput) -> None:
        if self._is_carried_retry(inp):
            return
        if self._status == "provisioning":
            raise _rejected("the session is still starting: wait for open_session to return")
        if (
            self._termination is not None
            or self._closing
            or (self._status not in ("running", "restoring") and not self._parking)
        ):
            why = self._termination or "closing"
            raise _rejected(f"step {inp.turn} rejected: the episode is over ({why})")
        if self._stepping:
            raise _rejected(
                f"step {inp.turn} rejected: step {self._next - 1} is still running "
                "(send one step at a time)"
            )
        if inp.turn != self._next:
            raise _rejected(f"step {inp.turn} is out of order: the next step is {self._next}")

    @workflow.update(name=contract.CLOSE)
    async def close(self) -> EpisodeResult:
        """End the session (after any step in flight), score, release: the result."""
        self._closing = True
        self._wake += 1
        await workflow.wait_condition(lambda: self._result is not None)
        assert self._result is not None
        return self._result

    # -- one step ----------------------------------------------------------------------

    async def _step(self, n: int, inp: StepInput) -> StepReply:
        while True:
            try:
                result = await self._turn_with(n, inp)
                break
            except (WorkerLost, BoxLostTurn, TurnBackstop, ActivityError) as e:
                if self._status != "running":
                    # Cancelled meanwhile: the release stopped the harness under this turn.
                    why = self._termination or "cancelled"
                    return StepReply(
                        turn=n, done=True, termination=why, error=f"the session ended ({why})"
                    )
                assert self._inp is not None  # set by run() before any step is accepted
                if isinstance(e, BoxLostTurn):
                    workflow.patched(BOX_FAILOVER_PATCH)  # marks the new path (see the patch)
                    if not self._may_fail_over(self._inp):
                        self._ref = None  # dropped by its worker: nothing to release
                        self._termination, self._error = "box_lost", str(e)
                        return StepReply(turn=n, done=True, termination="box_lost", error=str(e))
                    # A fresh box by replay, as a restart; this step then runs on it.
                    self._error = await self._restore(self._inp, None, failover=True)
                    if self._ref is not None:
                        continue
                    assert self._termination is not None
                    return StepReply(
                        turn=n, done=True, termination=self._termination, error=self._error
                    )
                if isinstance(e, WorkerLost) and self._may_restart(self._inp):
                    # on_worker_lost: restart. This step waits while a new session replays
                    # the recorded turns, then runs on it (its turn was never recorded).
                    self._error = await self._restore(self._inp, None)
                    if self._ref is not None:
                        continue
                    assert self._termination is not None
                    return StepReply(
                        turn=n, done=True, termination=self._termination, error=self._error
                    )
                if isinstance(e, (WorkerLost, TurnBackstop)):
                    # A backstop: the harness is stuck on a live worker; score the record.
                    self._score_recorded = isinstance(e, TurnBackstop)
                    why = "worker_lost" if isinstance(e, WorkerLost) else "turn_timeout"
                    self._termination, self._error = why, str(e)
                    return StepReply(turn=n, done=True, termination=why, error=str(e))
                # Not an outcome but a bug (as in EpisodeWorkflow): fail the workflow too.
                self._fatal = e
                raise
        self._turns.append(result.record)
        done, termination = result.observation.done, result.termination
        if not done and self._at_max_turns():
            done, termination = True, "max_turns"
        if done:
            self._termination = termination or "env_done"
            self._error = result.record.error
        self._set_details()
        return StepReply(
            turn=n,
            reply=result.record.reply,
            observation=result.observation.message,
            done=done,
            reward=result.observation.reward,
            termination=self._termination if done else None,
            error=result.record.error,
        )

    def _at_max_turns(self) -> bool:
        """max_turns bounds the whole chain. Runs before the patch counted this run's turns
        only, so a continued session ran on past it; ending it there now schedules score
        and release where those histories have the next step's turn: guarded."""
        if len(self._turns) >= self._max_turns:
            return True
        return self._turns_done >= self._max_turns and workflow.patched(CHAIN_MAX_TURNS_PATCH)

    async def _turn_with(self, n: int, inp: StepInput) -> TurnResult:
        """One `turn` activity on the session's worker, carrying the trainer's message."""
        assert self._ref is not None and self._inp is not None
        turn = TurnInput(
            session_id=self._ref.session_id, turn=n, message=inp.message, has_message=True
        )
        return await execute_turn(self._ref, self._inp.spec, turn, f"step {n}")


# Histories recorded before interactive sessions could continue-as-new.
INTERACTIVE_CAN_PATCH = "interactive-continue-as-new"
# Histories recorded while a continued session's max_turns counted only its own run.
CHAIN_MAX_TURNS_PATCH = "interactive-max-turns-whole-chain"
# A `park` signal releases the session between two steps and waits for `resume`, a
# step or `max_parked_s`, then replays the recorded turns on a new session; histories
# from before it never received one.
INTERACTIVE_PARK_PATCH = "interactive-park-and-resume"


def _rejected(message: str) -> ApplicationError:
    return ApplicationError(message, type=contract.STEP_REJECTED, non_retryable=True)
