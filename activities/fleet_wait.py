"""A provision that reaches a worker whose model fleet is saturated waits before it
starts a box.

While most of a worker's sessions wait on the model fleet the worker stops polling for
provisions (workers/backpressure.py). But the SDK reserves a slot and then polls with
it: a slot reserved while the fleet still had room takes the next provision that
comes, even once the fleet is full (one per poller). Such a provision waits here
instead of starting a box that would only join the queue, beating
`contract.FLEET_WAIT` so `episodes.client.batch.live` counts its episode as waiting, not
live; after `MAX_WAIT_S` it starts its box anyway (well inside its start-to-close
timeout: a fleet saturated that long is served late rather than never).
"""

from __future__ import annotations

import asyncio

from temporalio import activity

from episodes import contract
from episodes.model.fleet import saturated

MAX_WAIT_S = 120.0
POLL_S = 0.2


async def wait_for_fleet(max_wait_s: float = MAX_WAIT_S) -> float:
    """Wait while this worker's fleet is saturated (at most `max_wait_s`), beating;
    the seconds waited."""
    if not saturated():
        return 0.0
    loop = asyncio.get_running_loop()
    began = loop.time()
    activity.logger.info("provision waits for the model fleet (saturated on this worker)")
    while saturated() and loop.time() - began < max_wait_s:
        activity.heartbeat(contract.FLEET_WAIT)
        await asyncio.sleep(POLL_S)
    return loop.time() - began
