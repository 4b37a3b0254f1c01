"""How a session activity's failures leave the worker, and its heartbeat.

A harness, env or spec failure becomes the episode's typed outcome (scrubbed of the
session's secrets, not retried); a cancel of an episode that already ended is a quiet
outcome, not a traceback; a runtime that is unavailable here is this worker's fault
(the provision breaker counts it). Split from `activities/session.py`, which imports
these back (`spec_error_type` stays importable from there).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from activities import telemetry
from episodes import contract
from episodes.errors import (
    BoxLost,
    EnvironmentFailed,
    HarnessFailure,
    RuntimeUnavailable,
    SpecError,
    TurnOutOfOrder,
)
from episodes.session.live import LiveSession

log = logging.getLogger("episodes.activities")


async def opened(session: LiveSession) -> Any:
    """Open the session; a harness or env that fails is the episode's outcome (typed,
    not retried); a bad spec is not retried either."""
    try:
        return await session.open()
    except BaseException as e:
        outcome = {HarnessFailure: "harness_failure", SpecError: "spec_error"}
        kind = next((v for k, v in outcome.items() if isinstance(e, k)), "error")
        telemetry.PROVISIONS.labels(outcome=kind).inc()
        raise as_outcome(e, session) from None


def as_outcome(e: BaseException, session: LiveSession) -> BaseException:
    """The error as it leaves the worker, scrubbed of the session's secrets (a harness
    that echoes its environment to stderr puts them in its stderr tail)."""
    message = session.scrub_error(e) if isinstance(e, Exception) else str(e)
    if isinstance(e, HarnessFailure):
        return ApplicationError(message, type=e.error_type, non_retryable=True)
    if isinstance(e, EnvironmentFailed):
        return ApplicationError(message, type=contract.ENV_ERROR, non_retryable=True)
    if isinstance(e, SpecError):
        # A configuration error: the episode's outcome, one line in this worker's log
        # (BENIGN: the SDK does not log it again with a traceback).
        log.warning("%s: configuration error: %s", session.session_id, message)
        return ApplicationError(
            message,
            type=spec_error_type(e),
            non_retryable=True,
            category=ApplicationErrorCategory.BENIGN,
        )
    if isinstance(e, Exception) and message != str(e):
        return ApplicationError(message, type=type(e).__name__)
    return e


def spec_error_type(e: SpecError) -> str:
    """The failure type a spec error leaves the worker with: its class name when the
    contract names it, else `SpecError` (a subclass an env or runtime adds is a
    configuration error all the same)."""
    name = type(e).__name__
    return name if name in contract.SPEC_ERRORS else contract.SPEC_ERROR


@contextlib.contextmanager
def cancel_is_a_cancel(what: str, session: LiveSession | None) -> Iterator[None]:
    """A cancel the SDK would log as a failure with a traceback, as the quiet outcome it
    is: the episode ended (cancelled) while `what` ran, so its workflow closed (the
    server no longer knows the activity) or it released the session under the drive.
    A cancel the server asked for, a worker shutting down, a timeout: the SDK's own."""
    try:
        yield
    except asyncio.CancelledError:
        details = activity.cancellation_details()
        if details is not None and not details.not_found:
            raise  # asked for, a shutdown, a timeout: the SDK reports it as it is
        if details is None and not (session is not None and session.closed):
            raise  # not a cancel of this activity, nor of its session: a bug, loud
        raise ApplicationError(
            f"{what}: the episode ended (its workflow closed or released the session) while it ran",
            type=contract.SESSION_NOT_FOUND,
            non_retryable=True,
            category=ApplicationErrorCategory.BENIGN,
        ) from None


def worker_fault(e: BaseException) -> bool:
    """A provision failure that says this worker cannot run boxes at all: its runtime
    is unavailable here (no engine, no SDK, no credentials). Not the episode's own
    outcome (a harness that cannot start, a bad spec, the env's reset), not a box
    error one spec may cause (a missing image: ImageMissing), not a cancel: counting
    those would let one bad spec pause every worker of the fleet."""
    kind = e.type if isinstance(e, ApplicationError) else type(e).__name__
    return kind == RuntimeUnavailable.__name__


def out_of_order(e: TurnOutOfOrder) -> ApplicationError:
    return ApplicationError(str(e), type=contract.TURN_OUT_OF_ORDER, non_retryable=True)


def box_lost(e: BoxLost) -> ApplicationError:
    """Not retried: the session is dropped; the workflow restores in a fresh box."""
    return ApplicationError(str(e).splitlines()[0], type=contract.BOX_LOST, non_retryable=True)


async def heartbeat_until_cancelled(
    details: Callable[[], Any] | None = None, *, eager: bool = True
) -> None:
    """Tell the server this worker still holds the session while the harness works.
    Not `eager`: the first beat waits an interval (the heartbeat timeout runs from the
    activity's start anyway), so a quick activity costs no heartbeat call."""
    timeout = activity.info().heartbeat_timeout
    interval = max(0.2, timeout.total_seconds() / 3) if timeout else 5.0
    if not eager:
        await asyncio.sleep(interval)
    while True:
        if details is None:
            activity.heartbeat()
        else:
            activity.heartbeat(details())
        await asyncio.sleep(interval)
