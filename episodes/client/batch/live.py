"""How many of a batch's episodes are live (hold a box, or are starting one) and how
many wait for one: the figure beside `concurrency`, which is only a ceiling.

A batch (the client's `run_batch` or the batch workflow) keeps up to `concurrency`
episodes in flight, but a worker takes an episode's `provision` only while it has
room (`max_sessions`), its provision breaker is closed, and its sessions are not
mostly waiting on a saturated model fleet, and no provision there waits for room under
its box caps (workers/backpressure.py). Until then the
provision stays scheduled on the server: the episode holds no box and starts none,
it waits. So a batch whose episodes mostly wait on a saturated fleet starts no new
boxes, whoever drives it; this module only measures it.

    figure = await live_figure(client, "my-batch")
    print(figure.live, figure.waiting)

Read from the server, no worker involved: the batch's running episodes (visibility,
a second or so behind) and each one's pending activities (`describe`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client

from episodes import contract
from episodes.client.batch.server import episodes_query
from episodes.types.io import EpisodeProgress

DESCRIBE_CONCURRENCY = 16
RPC_TIMEOUT = timedelta(seconds=5)


@dataclass(frozen=True)
class LiveFigure:
    running: int
    """The batch's episodes whose workflow is running."""
    waiting: int
    """Of those, the ones whose `provision` no worker has taken yet, or a worker took
    and holds until its saturated model fleet has room (activities/fleet_wait.py) or
    its box caps have room (activities/box_wait.py): no box either way."""
    parked: int = 0
    """Of those, the parked ones (`episodes park`): a running workflow, no box."""

    @property
    def live(self) -> int:
        return self.running - self.waiting - self.parked

    def line(self, ceiling: int | None = None) -> str:
        """`live 3/16 · 5 wait for a box · 2 parked` (the ceiling: the batch's
        `concurrency`)."""
        of = f"/{ceiling}" if ceiling is not None else ""
        wait = f" · {self.waiting} wait for a box" if self.waiting else ""
        parked = f" · {self.parked} parked" if self.parked else ""
        return f"live {self.live}{of}{wait}{parked}"


async def live_figure(client: Client, batch: str, *, limit: int = 1000) -> LiveFigure:
    """The batch's running episodes (up to `limit`) and how many wait for a box. An
    episode that cannot be described just now (it closed meanwhile) counts as live."""
    query = f"{episodes_query(batch)} AND ExecutionStatus = 'Running'"
    ids = [wf.id async for wf in client.list_workflows(query, limit=limit)]
    gate = asyncio.Semaphore(DESCRIBE_CONCURRENCY)

    async def state(wid: str) -> str:
        """`waiting`, `parked` or `live`."""
        async with gate:
            try:
                handle = client.get_workflow_handle(wid)
                desc = await handle.describe(rpc_timeout=RPC_TIMEOUT)
                pending = desc.raw_description.pending_activities
                for a in pending:
                    if a.activity_type.name != contract.PROVISION:
                        continue
                    if a.state == PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED:
                        return "waiting"  # no worker took it
                    details = a.heartbeat_details.payloads
                    said = await client.data_converter.decode(details) if details else []
                    if contract.FLEET_WAIT in said or contract.BOX_WAIT in said:
                        return "waiting"  # a worker took it and waits for its fleet or caps
                if not pending:
                    # No activity: parked, or between two (its progress says which).
                    progress = await handle.query(
                        contract.PROGRESS,
                        args=[None, 0],
                        result_type=EpisodeProgress,
                        rpc_timeout=RPC_TIMEOUT,
                    )
                    if progress.status == "parked":
                        return "parked"
            except Exception:
                return "live"
        return "live"

    states = await asyncio.gather(*(state(w) for w in ids))
    return LiveFigure(
        running=len(ids), waiting=states.count("waiting"), parked=states.count("parked")
    )


async def watch_live(
    client: Client, batch: str, show: Callable[[LiveFigure], None], *, interval_s: float = 2.0
) -> None:
    """Call `show` with the batch's figure every `interval_s` until cancelled (a round
    the server does not answer is skipped). A round takes a describe per running
    episode: rounds are spaced at least 4 times their own length, so a large batch's
    progress line costs the server a fifth of one describe stream at most."""
    loop = asyncio.get_running_loop()
    while True:
        began = loop.time()
        try:
            show(await live_figure(client, batch))
        except Exception:  # the server is busy or gone: the next round tries again
            pass
        await asyncio.sleep(max(interval_s, 4 * (loop.time() - began)))
