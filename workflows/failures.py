"""How workflows read an activity's failure: its type, its message, a lost worker.

Workflow code: deterministic, models only.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    FailureError,
    TimeoutError,
    TimeoutType,
)

with workflow.unsafe.imports_passed_through():
    from episodes import contract
    from episodes.types.io import SessionRef
    from episodes.types.results import Termination

# Histories recorded before it counted every activity timeout as a lost worker,
# start-to-close (the activity's own backstop) included.
BACKSTOP_PATCH = "backstop-timeout-not-worker-lost"

# Histories recorded before a spec error found while provisioning (an env the worker
# cannot import, a missing secret, a box the spec cannot start) ended the episode
# `harness_start_failed` (`config_error`): the workflow failed, and batches ran it again.
SPEC_ERROR_PATCH = "spec-error-start-failed"

# A box that died under a turn (BoxLost: removed from outside, its engine gone) fails
# the episode over to a fresh box by replay, or ends it `box_lost`. Before it, the
# activities raised no such error: the box's death was the harness's crash
# (`harness_crashed`), so histories from before never reach the new path.
BOX_FAILOVER_PATCH = "box-failover"

# Only these mean nobody holds the session: the task was never picked up, or the
# worker running it stopped heartbeating.
_LOST_TIMEOUTS = (TimeoutType.HEARTBEAT, TimeoutType.SCHEDULE_TO_START)


def failure_type(e: ActivityError) -> str | None:
    """The ApplicationError type the activity raised (None for a timeout, a cancel...)."""
    cause = e.cause
    return cause.type if isinstance(cause, ApplicationError) else None


def provision_failure(e: ActivityError) -> Termination | None:
    """The outcome a `provision` (or `restore`) ended with, if it is one: a harness
    failure, or `env_error` (the env's reset raised)."""
    kind = failure_type(e)
    if is_spec_error(e):
        return "harness_start_failed"
    # Looked up in the declared tuple, so the result is typed as the termination it is.
    return next((f for f in contract.PROVISION_OUTCOMES if f == kind), None)


def is_spec_error(e: ActivityError) -> bool:
    """A `provision` (or `restore`) that failed with a spec error: a configuration error,
    the episode's outcome (older histories: the workflow failed)."""
    return failure_type(e) in contract.SPEC_ERRORS and workflow.patched(SPEC_ERROR_PATCH)


def failure_message(e: ActivityError) -> str:
    cause = e.cause
    return cause.message if isinstance(cause, FailureError) else str(cause or e)


def classify(e: ActivityError) -> str | None:
    """ "lost" (the worker holding the session is gone), "backstop" (the activity ran past
    its start-to-close timeout on a live worker) or None (anything else). Pure."""
    cause = e.cause
    if isinstance(cause, TimeoutError):
        return "lost" if cause.type in _LOST_TIMEOUTS else "backstop"
    if isinstance(cause, ApplicationError) and cause.type == contract.SESSION_NOT_FOUND:
        return "lost"
    return None


def is_box_lost(e: ActivityError) -> bool:
    """The session's box died under a turn, not by the harness's doing (the worker
    dropped the session): the episode fails over to a fresh box."""
    return failure_type(e) == contract.BOX_LOST


def is_worker_lost(e: ActivityError) -> bool:
    """Nobody holds the session any more: the episode ends `worker_lost` (or restarts)."""
    kind = classify(e)
    if kind == "backstop":
        # Old histories took every timeout for a lost worker: they replay that way.
        return not workflow.patched(BACKSTOP_PATCH)
    return kind == "lost"


def is_backstop_timeout(e: ActivityError) -> bool:
    """The activity exceeded its start-to-close timeout (call after `is_worker_lost`)."""
    return classify(e) == "backstop"


def last_heartbeat_turn(e: ActivityError) -> int | None:
    """The turn a drive was working on when it went silent (its heartbeat details)."""
    cause = e.cause
    details = cause.last_heartbeat_details if isinstance(cause, TimeoutError) else ()
    if details and isinstance(details[0], dict) and isinstance(details[0].get("turn"), int):
        return details[0]["turn"]
    return None


def lost_message(e: ActivityError, ref: SessionRef) -> str:
    return (
        f"worker {ref.worker_id} (queue {ref.task_queue}) lost the session "
        f"{ref.session_id}: {failure_message(e)}"
    )


def backstop_message(e: ActivityError, what: str, timeout_s: float) -> str:
    return (
        f"the {what} ran past its {timeout_s:g} s start-to-close backstop on a live worker "
        f"(the harness's own turn timeout did not end it): {failure_message(e)}"
    )
