"""`await_episode`: the result of an episode that already exists under its workflow id;
`recorded_usage`: what a failed episode spent, for the batch's budget.

A batch that is re-run (after it was terminated, or over episodes an earlier
client-side `episodes run` started with the same batch id) must not run an episode
twice. Starting the child then fails with "already started", and a workflow cannot
await a workflow it did not start, so this activity does it through the client.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TypeVar

from temporalio import activity
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError

from episodes import contract
from episodes.client.histories.transcript import recorded_usage as read_usage
from episodes.types.priority import RecordedUsage
from episodes.types.results import EpisodeResult

HEARTBEAT_S = 5.0
T = TypeVar("T")


async def await_workflow(workflow_id: str, result_type: type[T], noun: str) -> T:
    """The result of a workflow this activity's caller did not start, beating while
    it runs (so a lost worker is noticed); its failure is the caller's, not retried."""
    handle = activity.client().get_workflow_handle(workflow_id, result_type=result_type)
    waiting = asyncio.ensure_future(handle.result())
    try:
        while True:
            done, _ = await asyncio.wait({waiting}, timeout=HEARTBEAT_S)
            if done:
                break
            activity.heartbeat()
        return waiting.result()
    except WorkflowFailureError as e:
        raise ApplicationError(
            f"{noun} {workflow_id} failed: {e.cause}",
            type=contract.EPISODE_FAILED,
            non_retryable=True,
        ) from None
    finally:
        if not waiting.done():
            waiting.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await waiting


@activity.defn(name=contract.AWAIT_EPISODE)
async def await_episode(workflow_id: str) -> EpisodeResult:
    return await await_workflow(workflow_id, EpisodeResult, "episode")


@activity.defn(name=contract.RECORDED_USAGE)
async def recorded_usage(workflow_id: str) -> RecordedUsage:
    """An episode whose workflow failed has no result: its history's turns say what it
    spent (a batch's budget counts every attempt, `BatchBudget`)."""
    return await read_usage(activity.client(), workflow_id)
