"""How workflows read an activity's failure: its type, its message, a lost worker.

Workflow code: deterministic, models only.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, FailureError, TimeoutError

with workflow.unsafe.imports_passed_through():
    from episodes import contract
    from episodes.messages import SessionRef
    from episodes.models import ErrorType


def failure_type(e: ActivityError) -> str | None:
    """The ApplicationError type the activity raised (None for a timeout, a cancel...)."""
    cause = e.cause
    return cause.type if isinstance(cause, ApplicationError) else None


def provision_failure(e: ActivityError) -> ErrorType | None:
    """The harness failure a `provision` ended with (the episode's outcome), if it is one."""
    kind = failure_type(e)
    # Looked up in the declared tuple, so the result is typed as the termination it is.
    return next((f for f in contract.PROVISION_FAILURES if f == kind), None)


def failure_message(e: ActivityError) -> str:
    cause = e.cause
    return cause.message if isinstance(cause, FailureError) else str(cause or e)


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
