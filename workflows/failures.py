"""How workflows read an activity's failure: its type, its message, a lost worker.

Workflow code: deterministic, models only.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, TimeoutError

with workflow.unsafe.imports_passed_through():
    from episodes import contract
    from episodes.messages import SessionRef


def failure_type(e: ActivityError) -> str | None:
    """The ApplicationError type the activity raised (None for a timeout, a cancel...)."""
    cause = e.cause
    return cause.type if isinstance(cause, ApplicationError) else None


def failure_message(e: ActivityError) -> str:
    cause = e.cause
    return cause.message if cause is not None else str(e)


def is_worker_lost(e: ActivityError) -> bool:
    """Nobody holds the session any more: the episode ends `worker_lost`."""
    cause = e.cause
    if isinstance(cause, TimeoutError):
        return True  # schedule-to-start or heartbeat: nobody is holding the session
    return isinstance(cause, ApplicationError) and cause.type == contract.SESSION_NOT_FOUND


def lost_message(e: ActivityError, ref: SessionRef) -> str:
    return (
        f"worker {ref.worker_id} (queue {ref.task_queue}) lost the session "
        f"{ref.session_id}: {failure_message(e)}"
    )
