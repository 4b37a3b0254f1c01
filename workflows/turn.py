"""One `turn` activity on the session's worker (interactive steps; the study's baseline).

Workflow code: deterministic, models only.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

from workflows.failures import (
    backstop_message,
    failure_message,
    is_backstop_timeout,
    is_box_lost,
    is_worker_lost,
    lost_message,
)

with workflow.unsafe.imports_passed_through():
    from episodes import contract
    from episodes.types.io import SessionRef, TurnInput
    from episodes.types.results import TurnResult
    from episodes.types.spec import EpisodeSpec


class WorkerLost(Exception):
    """The worker holding the session stopped answering."""


class BoxLostTurn(Exception):
    """The session's box died under the turn, not by the harness's doing; the worker
    dropped the session (a box failover follows, or the episode ends `box_lost`)."""


class TurnBackstop(Exception):
    """The turn activity ran past its start-to-close backstop on a live worker."""


async def execute_turn(
    ref: SessionRef, spec: EpisodeSpec, turn: TurnInput, summary: str
) -> TurnResult:
    lost = timedelta(seconds=spec.worker_lost_timeout_s)
    backstop = spec.turn_timeout_s + 2 * spec.harness.stop_timeout_s + 30
    try:
        return await workflow.execute_activity(
            contract.turn,
            turn,
            task_queue=ref.task_queue,
            # A dead worker never picks the task up: noticed after `lost`, not never.
            schedule_to_start_timeout=lost,
            heartbeat_timeout=lost,
            # The harness enforces turn_timeout_s itself; this is the backstop.
            start_to_close_timeout=timedelta(seconds=backstop),
            retry_policy=RetryPolicy(
                maximum_attempts=5,
                initial_interval=timedelta(milliseconds=200),
                non_retryable_error_types=[contract.SESSION_NOT_FOUND, contract.TURN_OUT_OF_ORDER],
            ),
            summary=summary,
        )
    except ActivityError as e:
        if is_worker_lost(e):
            raise WorkerLost(lost_message(e, ref)) from None
        if is_box_lost(e):
            raise BoxLostTurn(failure_message(e)) from None
        if is_backstop_timeout(e):
            raise TurnBackstop(backstop_message(e, summary, backstop)) from None
        raise
