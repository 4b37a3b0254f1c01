"""`provision_and_drive`: a non-interactive episode's first run in one activity (issue 22).

`SessionActivities.provision`, then `SessionActivities._drive` on the session it
opened: the same code paths, so the session is this worker's (registered here; its
own queue serves what comes after: a later run's drive, a release) and the drive
records, heartbeats, scores and releases as `drive` does. Once the session exists
the heartbeats carry it (`{"turn": n, "session": SessionRef}`), so a lost worker's
heartbeat timeout tells the workflow which session it lost.

Never retried once the session exists: another worker would open a second session
and run the recorded turns again. The workflow's retry policy does not retry its
timeouts (`contract.TIMEOUTS_NOT_RETRIED`), and an attempt that still finds a session
in the last heartbeat fails `SessionNotFound` with it. Once the session exists:
- the drive ended (or paused): {session, drive};
- the drive failed retryably (an Update that did not go through...): {session}; the
  workflow drives on with the `drive` activity on the session's queue, as a retried
  drive would (the session answers the turns it ran from its record);
- the drive failed for good (TurnOutOfOrder...): the session is released, the error
  raised with the session in its details;
- cancelled by the server (the workflow was cancelled, this attempt timed out): the
  session is released; cut short by this worker (its drain gave up on it, it shut
  down): released too, and `SessionNotFound` with the session (a lost worker).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from episodes import contract
from episodes.types.io import (
    ProvisionAndDriveInput,
    ProvisionAndDriveResult,
    ReleaseInput,
    SessionRef,
)

if TYPE_CHECKING:
    from activities.session import SessionActivities

log = logging.getLogger("episodes.activities")

# Raised by the drive, not worth a second drive on the same session.
_FOR_GOOD = (contract.SESSION_NOT_FOUND, contract.TURN_OUT_OF_ORDER)


async def provision_and_drive(
    acts: SessionActivities, inp: ProvisionAndDriveInput
) -> ProvisionAndDriveResult:
    earlier = beaten_session(activity.info().heartbeat_details)
    if earlier is not None:
        raise session_lost(earlier, "an earlier attempt opened the session and stopped beating")
    ref = await acts.provision(inp.provision)
    acts.fused.add(ref.session_id)
    try:
        result = await acts._drive(inp.drive.model_copy(update={"session_id": ref.session_id}), ref)
    except asyncio.CancelledError:
        await asyncio.shield(_release(acts, ref))
        if activity.is_cancelled() and not activity.is_worker_shutdown():
            raise
        raise session_lost(
            {"session": ref.model_dump(mode="json")},
            f"worker {acts.worker_id} stopped during the drive",
        ) from None
    except Exception as e:
        if isinstance(e, ApplicationError) and (e.non_retryable or e.type in _FOR_GOOD):
            await _release(acts, ref)
            # Named: the workflow fails it as a drive's failure, not a provision's.
            named = {"session": ref.model_dump(mode="json")}
            raise ApplicationError(e.message, named, type=e.type, non_retryable=True) from e
        log.warning("drive of %s failed (the workflow drives on): %r", ref.session_id, e)
        return ProvisionAndDriveResult(session=ref)
    finally:
        acts.fused.discard(ref.session_id)
    return ProvisionAndDriveResult(session=ref, drive=result)


def beaten_session(details: Sequence[Any]) -> dict[str, Any] | None:
    """The last heartbeat's details if they name a session (the activity opened it)."""
    if details and isinstance(details[0], dict) and isinstance(details[0].get("session"), dict):
        return details[0]
    return None


def session_lost(beat: dict[str, Any], why: str) -> ApplicationError:
    ref = SessionRef.model_validate(beat["session"])
    return ApplicationError(
        f"session {ref.session_id} is not on a live worker any more: {why}",
        beat,
        type=contract.SESSION_NOT_FOUND,
        non_retryable=True,
    )


async def _release(acts: SessionActivities, ref: SessionRef) -> None:
    await acts.release(ReleaseInput(session_id=ref.session_id))
