"""Park or resume every running episode of a batch at once: preemption.

    parked = await client.park_batch("rollouts-step-120")    # the workers are free for evals
    ...                                                      # run the eval batch
    await client.resume_batch("rollouts-step-120")           # the rollouts go on

The batch's episodes are found as `episodes export` finds them (the `EpisodeBatch`
search attribute), those still running, and each gets the `park` (or `resume`) signal:
the same as `client.park(id)` one by one. An episode that ended between the listing and
its signal is left out. Visibility lags a moment behind a start: an episode started an
instant before the call may be missed (run it again; parking a parked episode, or
resuming a running one, changes nothing).
"""

from __future__ import annotations

import asyncio

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from episodes import contract
from episodes.client.batch.server import episodes_query
from episodes.errors import EpisodesError

# How many signals are in flight at once (a training batch may have thousands running).
SIGNAL_CONCURRENCY = 32


async def running_episodes(client: Client, batch: str) -> list[str]:
    """The workflow ids of the batch's episodes still running, sorted."""
    query = f"{episodes_query(batch)} AND ExecutionStatus = 'Running'"
    return sorted([wf.id async for wf in client.list_workflows(query)])


async def signal_batch(client: Client, batch: str, signal: str) -> list[str]:
    """Send `signal` (`contract.PARK` or `contract.RESUME`) to every running episode of
    the batch; the ids it reached, sorted."""
    if signal not in (contract.PARK, contract.RESUME):
        raise EpisodesError(f"signal_batch: {signal!r} is neither park nor resume")
    gate = asyncio.Semaphore(SIGNAL_CONCURRENCY)

    async def one(wid: str) -> str | None:
        async with gate:
            try:
                await client.get_workflow_handle(wid).signal(signal)
            except RPCError as e:
                if e.status == RPCStatusCode.NOT_FOUND:
                    return None  # it ended since the listing
                raise EpisodesError(f"{signal} {wid}: {e.message}") from None
            return wid

    reached = await asyncio.gather(*(one(w) for w in await running_episodes(client, batch)))
    return [w for w in reached if w is not None]
