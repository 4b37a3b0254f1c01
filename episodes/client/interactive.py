"""Interactive sessions: the trainer writes each turn (OpenEnv-style reset/step).

    async with await client.open_session(spec, task) as session:
        obs = session.first_observation              # env.reset(task)
        while not session.done:
            r = await session.step(policy(obs))      # the trainer's message -> the harness
            obs = r.observation                      # env.step(harness reply)
    result = session.result                          # scored and released on exit

Each step is one Temporal Update on an InteractiveEpisodeWorkflow whose update id,
`<workflow id>:step:<n>`, is the idempotency key: calling `step` again after a
network error (or `step(..., idempotency_key=k)` with the same key) returns the
recorded reply, and the harness sees the message once.

`attach_session(client, workflow_id)` re-attaches to a running session by its id without
starting one (a trainer back after a lost connection), with its last step's recorded reply.

`await session.park()` (or `client.park(session.workflow_id)`, `episodes park ID`)
releases the box between two steps; the next `step`, or `resume()`, brings the session
back on any worker with its recorded turns replayed exactly.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.common import Priority, WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from episodes import contract
from episodes.client.starting import start_options
from episodes.errors import SessionFailed, StepRejected
from episodes.types.io import EpisodeProgress, InteractiveInput, SessionOpened, StepInput, StepReply
from episodes.types.results import EpisodeResult, Task, Termination
from episodes.types.spec import EpisodeSpec
from episodes.types.tuning import DEFAULT_IDLE_TIMEOUT_S, DEFAULT_TURNS_PER_RUN


class InteractiveSession:
    """One live episode driven step by step. Use `open_session` to make one."""

    def __init__(self, handle: WorkflowHandle, opened: SessionOpened) -> None:
        self.handle = handle
        self.workflow_id: str = handle.id
        self.first_observation: Any = opened.first_observation
        self.done = opened.done
        self.termination: Termination | None = opened.termination
        self.error = opened.error
        self.turn = opened.turns_done  # the index the next step carries
        self.last: StepReply | None = None
        self.result: EpisodeResult | None = None

    async def step(self, message: Any, *, idempotency_key: str | None = None) -> StepReply:
        """Send `message` to the harness as the next turn; the reply and the env's verdict."""
        n = self.turn
        key = idempotency_key or f"{self.workflow_id}:step:{n}"
        try:
            reply = await self._update_latest_run(
                contract.STEP, StepInput(turn=n, message=message), key, StepReply
            )
        except WorkflowUpdateFailedError as e:
            cause = e.cause
            if isinstance(cause, ApplicationError) and cause.type == contract.STEP_REJECTED:
                raise StepRejected(cause.message) from None
            raise SessionFailed(f"session {self.workflow_id}: step {n} failed: {cause}") from None
        except RPCError as e:
            if not await _closed(self.handle, e):
                raise
            self.done = True
            raise StepRejected(
                f"step {n} rejected: session {self.workflow_id} has ended "
                "(close() returns its result)"
            ) from None
        self.turn = n + 1
        self.last = reply
        if reply.done:
            self.done, self.termination, self.error = True, reply.termination, reply.error
        return reply

    async def recorded(self, n: int) -> StepReply | None:
        """Step `n`'s reply as the session recorded it, for a step already taken (`n` <
        `turn`): its update id sent again, which Temporal answers with the outcome it
        keeps, so the harness sees nothing. None when the session no longer has it (a
        run it continued from, or a step sent under an `idempotency_key` of one's own):
        the validator then rejects it as out of order, so it never runs again."""
        if not 0 <= n < self.turn:
            raise StepRejected(f"step {n} has not been taken: the next step is {self.turn}")
        try:
            return await self._update_latest_run(
                contract.STEP, StepInput(turn=n), f"{self.workflow_id}:step:{n}", StepReply
            )
        except (WorkflowUpdateFailedError, RPCError):
            return None

    async def park(self) -> None:
        """Park the session: once no step runs it releases its box and harness (nothing
        runs, nothing is billed) and waits durably, its idle clock stopped, for `resume`,
        the next `step` (which resumes it and then runs) or the spec's `max_parked_s`."""
        await self.handle.signal(contract.PARK)

    async def resume(self) -> None:
        """Resume a parked session now: a new session on any worker replays its recorded
        turns exactly, then waits for the next step (its idle clock starting again).
        Not parked: a park asked and not taken yet is called off."""
        await self.handle.signal(contract.RESUME)

    async def close(self) -> EpisodeResult:
        """End the session (if the env has not), score it, release the box: the result.

        Idempotent; also returns the result of a session that ended on its own
        (done, idle timeout, cancel).
        """
        if self.result is not None:
            return self.result
        try:
            result = await self._update_latest_run(
                contract.CLOSE, None, f"{self.workflow_id}:close", EpisodeResult
            )
        except (WorkflowUpdateFailedError, RPCError) as e:
            if isinstance(e, RPCError) and not await _closed(self.handle, e):
                raise
            result = await _result(self.handle)  # it ended first: its result is final
        self.result = result
        self.done, self.termination, self.error = True, result.termination, result.error
        return result

    async def _update_latest_run(self, name: str, arg: Any, key: str, result_type: type) -> Any:
        """An Update to the session's latest run. A session continues-as-new between
        steps: an Update that reached the run as it closed is sent once more, with the
        same id, to the run that continued it."""
        args = [] if arg is None else [arg]
        for attempt in range(2):
            try:
                return await self.handle.execute_update(
                    name, args=args, id=key, result_type=result_type
                )
            except RPCError as e:
                if attempt or not _run_closed(e) or await _closed(self.handle, e):
                    raise
        raise AssertionError("unreachable")

    async def progress(
        self, *, since: int | None = None, last: int | None = None
    ) -> EpisodeProgress:
        """Where the session is, with its latest turns (the workflow's `progress` query):
        from turn `since` on, at most `last` (default 100) and at most 2 MiB of them."""
        return await self.handle.query(
            contract.PROGRESS, args=[since, last], result_type=EpisodeProgress
        )

    async def __aenter__(self) -> InteractiveSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def open_session(
    client: Client,
    task_queue: str,
    spec: EpisodeSpec,
    task: Task,
    sample: int = 0,
    *,
    batch: str | None = None,
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
    workflow_id: str | None = None,
    turns_per_run: int = DEFAULT_TURNS_PER_RUN,
) -> InteractiveSession:
    """Start (or re-attach to) a session and wait for its first observation.

    `EpisodesClient.open_session` calls this with its client and task queue. The
    workflow id defaults to
    `<batch>.<task>.s<sample>.session`: opening it while it runs re-attaches (the
    session continues at the next turn); once it has ended, the same id starts a
    fresh session. A harness that fails to start is an outcome, not an exception:
    the session comes back `done` with its `termination`; `close()` gives the result.
    """
    batch = batch or spec.name
    wid = workflow_id or contract.session_workflow_id(batch, task.id, sample)
    options = start_options(
        spec,
        task,
        batch,
        workflow_id=wid,
        task_queue=task_queue,
        summary=f"interactive · {spec.env} · task {task.id} · sample {sample}",
    )
    # A session's id is reused once it ended (a fresh session); it carries no priority.
    options = dataclasses.replace(
        options, id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE, priority=Priority.default
    )
    handle = await client.start_workflow(
        contract.INTERACTIVE_WORKFLOW,
        InteractiveInput(
            spec=contract.single_task_spec(spec, task),
            task=task,
            sample=sample,
            batch=batch,
            idle_timeout_s=idle_timeout_s,
            turns_per_run=turns_per_run,
        ),
        result_type=EpisodeResult,
        **options.kwargs(),
    )
    try:
        opened = await handle.execute_update(contract.OPEN, result_type=SessionOpened)
    except (WorkflowUpdateFailedError, RPCError) as e:
        if isinstance(e, RPCError) and not await _closed(handle, e):
            raise
        # It ended before answering (its harness failed to start, or it was cancelled).
        return await _ended(handle)
    return InteractiveSession(handle, opened)


async def _ended(handle: WorkflowHandle[Any, EpisodeResult]) -> InteractiveSession:
    """A session that has ended, as `open_session` and `attach_session` hand it back:
    `done`, with its final result."""
    result = await _result(handle)
    session = InteractiveSession(
        handle,
        SessionOpened(
            turns_done=result.turns,
            done=True,
            termination=result.termination,
            error=result.error,
        ),
    )
    session.result = result
    return session


async def attach_session(client: Client, workflow_id: str) -> InteractiveSession | None:
    """Re-attach to the session under `workflow_id` without starting one (`open_session`
    starts one when none runs): None when no workflow has that id. A session that has
    ended comes back `done` with its `result`. One that has taken steps has `last` set
    to its last step's recorded reply (`recorded`), the env message to act on next."""
    handle = client.get_workflow_handle(workflow_id, result_type=EpisodeResult)
    try:
        opened = await handle.execute_update(contract.OPEN, result_type=SessionOpened)
    except (WorkflowUpdateFailedError, RPCError):
        try:
            desc = await handle.describe()
        except RPCError as d:
            if d.status == RPCStatusCode.NOT_FOUND:
                return None
            raise
        if desc.workflow_type != contract.INTERACTIVE_WORKFLOW:
            raise SessionFailed(
                f"{workflow_id} is not an interactive session (a {desc.workflow_type})"
            ) from None
        if desc.status == WorkflowExecutionStatus.RUNNING:
            raise
        return await _ended(handle)  # it has ended: its result is final
    session = InteractiveSession(handle, opened)
    if session.turn > 0:
        session.last = await session.recorded(session.turn - 1)
    return session


def _run_closed(e: RPCError) -> bool:
    """The status the server answers an Update with when the run it reached is closed
    (it completed, failed, or continued-as-new) or the workflow is unknown."""
    return e.status == RPCStatusCode.NOT_FOUND


async def _closed(handle: WorkflowHandle, e: RPCError) -> bool:
    """The session itself is over, so it takes no more updates: the run was closed and the
    latest run of the workflow id is not running (a continued-as-new one is)."""
    if not _run_closed(e):
        return False
    try:
        # The session's handle names no run: this is the workflow id's latest run.
        desc = await handle.describe()
    except RPCError as d:
        return d.status == RPCStatusCode.NOT_FOUND
    return desc.status != WorkflowExecutionStatus.RUNNING


async def _result(handle: WorkflowHandle) -> EpisodeResult:
    try:
        return await handle.result()
    except WorkflowFailureError as e:
        raise SessionFailed(f"session {handle.id} failed: {e.cause}") from None
