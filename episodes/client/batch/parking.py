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
from datetime import timedelta

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from episodes import contract
from episodes.client.batch.server import episodes_query
from episodes.errors import EpisodesError
from episodes.types.io import EpisodeProgress
from episodes.words import plural

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
    return await _signal(client, await running_episodes(client, batch), signal)


async def _signal(client: Client, ids: list[str], signal: str) -> list[str]:
    """Send `signal` to each of `ids`; those it reached (one that ended is left out)."""
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

    reached = await asyncio.gather(*(one(w) for w in ids))
    return [w for w in reached if w is not None]


RPC_TIMEOUT = timedelta(seconds=10)


class ParkReport(list[str]):
    """What `park_batch` did: the ids it asked to park now (the list itself, sorted),
    beside those it left alone because a park was asked of them already (they park at
    their next turn boundary) or because they are parked. A parked episode is still a
    running workflow: asking it again would only leave a request pending."""

    def __init__(self, asked: list[str], already_asked: list[str], parked: list[str]) -> None:
        super().__init__(asked)
        self.already_asked = already_asked
        self.parked = parked

    @property
    def asked(self) -> list[str]:
        return list(self)

    @property
    def running(self) -> int:
        """Those not parked yet: asked now or before, they park at a turn boundary."""
        return len(self) + len(self.already_asked)

    def line(self, batch: str) -> str:
        """`park asked of 3 running episodes of batch B; 2 asked already, 5 parked`."""
        said = f"park asked of {plural(len(self), 'running episode')} of batch {batch}"
        return f"{said}; {len(self.already_asked)} asked already, {len(self.parked)} parked"


async def park_batch(client: Client, batch: str) -> ParkReport:
    """Park the batch's running episodes that are neither parked nor asked to park
    already: each one's `progress` says which, and only the others get the signal
    (one whose progress cannot be read, its worker gone, gets it: a park is spent on a
    parked episode anyway)."""
    gate = asyncio.Semaphore(SIGNAL_CONCURRENCY)

    async def state(wid: str) -> str:
        async with gate:
            try:
                progress = await client.get_workflow_handle(wid).query(
                    contract.PROGRESS,
                    args=[None, 0],
                    result_type=EpisodeProgress,
                    rpc_timeout=RPC_TIMEOUT,
                )
            except Exception:
                return "ask"
        if progress.status == "parked":
            return "parked"
        return "asked" if progress.park_asked else "ask"

    running = await running_episodes(client, batch)
    states = await asyncio.gather(*(state(w) for w in running))
    todo = [w for w, s in zip(running, states, strict=True) if s == "ask"]
    reached = await _signal(client, todo, contract.PARK)
    return ParkReport(
        reached,
        [w for w, s in zip(running, states, strict=True) if s == "asked"],
        [w for w, s in zip(running, states, strict=True) if s == "parked"],
    )
