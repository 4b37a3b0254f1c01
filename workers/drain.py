"""Draining a worker: no new provisions, running sessions finish, the rest fail fast.

On SIGTERM (`EpisodeWorker.request_stop()`) the worker stops its provision poller
at once, lets the sessions it holds run until they are released or the drain
timeout passes, then abandons what is left. An abandoned session's in-flight
`drive`, `turn` or `score` fails right away as `SessionNotFound` (the workflow's
worker-lost signal), so its episode ends `worker_lost` — or is handed over, per
its `on_worker_lost` policy — without waiting for a heartbeat timeout.

This interceptor is the enforcement point inside the activities: it refuses a
provision that still reaches a draining worker (a poll already in flight when the
signal came), retryably, so the server hands it to another worker; it counts the
provisions in flight (the drain waits for them: their sessions are live too); and it
races every activity against the abandon signal (a provision or a batch's
`await_episode` cut short is refused retryably, for another worker to do).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

from episodes import contract

#: The error type of a provision refused by a draining worker (retryable: another
#: worker takes the next attempt).
WORKER_DRAINING = "WorkerDraining"

_SESSION_ACTIVITIES = {contract.DRIVE, contract.TURN, contract.SCORE}


class DrainState:
    """Shared by the worker and its interceptors; set once, never cleared."""

    def __init__(self, worker_id: str) -> None:
        self.worker_id = worker_id
        self.draining = False
        self.drain_timeout_s = 0.0
        self.provisioning = 0  # provisions running now (a drain waits for them)
        self.at_once = False  # stopped without waiting out the drain (a second signal)
        self._abandoned: asyncio.Event | None = None

    @property
    def abandoned(self) -> asyncio.Event:
        # Created lazily so that it binds to the loop the worker runs on.
        if self._abandoned is None:
            self._abandoned = asyncio.Event()
        return self._abandoned

    def abandon(self) -> None:
        self.abandoned.set()

    def why(self) -> str:
        """Why live sessions were abandoned, for their errors and the worker's last line."""
        if self.at_once:
            return "it was stopped at once (a second stop signal), not drained"
        return f"its drain timeout ({self.drain_timeout_s:g} s) passed"

    def refused(self, what: str) -> ApplicationError:
        # Retryable: the server hands the next attempt to another worker.
        return ApplicationError(
            f"worker {self.worker_id} is draining: {what} goes to another worker",
            type=WORKER_DRAINING,
        )

    def abandoned_error(self, what: str) -> ApplicationError:
        if what not in _SESSION_ACTIVITIES:
            return self.refused(what)  # a provision, a batch's await: another worker does it
        return ApplicationError(
            f"worker {self.worker_id} stopped: {self.why()} with {what} still running; "
            "the session was abandoned",
            type=contract.SESSION_NOT_FOUND,
            non_retryable=True,
        )


class DrainInterceptor(Interceptor):
    def __init__(self, state: DrainState) -> None:
        self.state = state

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _Inbound(next, self.state)


class _Inbound(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, state: DrainState) -> None:
        super().__init__(next)
        self.state = state

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        kind = activity.info().activity_type
        if kind == contract.PROVISION and self.state.draining:
            raise self.state.refused(kind)
        if self.state.abandoned.is_set():
            raise self.state.abandoned_error(kind)
        provision = kind == contract.PROVISION
        self.state.provisioning += provision
        try:
            return await self._unless_abandoned(kind, input)
        finally:
            self.state.provisioning -= provision

    async def _unless_abandoned(self, kind: str, input: ExecuteActivityInput) -> Any:
        work = asyncio.ensure_future(self.next.execute_activity(input))
        abandoned = asyncio.ensure_future(self.state.abandoned.wait())
        try:
            await asyncio.wait({work, abandoned}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            # Cancelled by the server or the SDK: the activity itself handles that.
            work.cancel()
            return await work
        finally:
            abandoned.cancel()
        if work.done():
            return work.result()  # it finished first (or in the same instant): it stands
        work.cancel()
        with contextlib.suppress(BaseException):
            await work  # its own cleanup (a half-open session closes itself)
        raise self.state.abandoned_error(kind)
