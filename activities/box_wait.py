"""A provision past its worker's box caps waits for room (episodes/runtimes/caps.py).

The wait is backpressure, as the model fleet's is (activities/fleet_wait.py): while a
provision waits here its worker stops polling for provisions (workers/backpressure.py),
and the waiting provision beats `contract.BOX_WAIT`, so `episodes.client.batch.live`
counts its episode as waiting for a box, not live.

The wait is bounded by the provision's own start-to-close timeout: it ends with time
left for the box to start and the harness to be ready (`BOX_START_S` plus the spec's
`ready_timeout_s`); past that the box starts over the cap (served late rather than
failed: the backpressure keeps such provisions to the few a worker had already taken).
"""

from __future__ import annotations

from temporalio import activity

from episodes import contract
from episodes.types.spec import EpisodeSpec

# What a box start may take, kept out of the wait (a cloud box can take minutes).
BOX_START_S = 120.0


def box_wait_s(spec: EpisodeSpec) -> float | None:
    """How long this provision may wait for room (None: no bound known)."""
    timeout = activity.info().start_to_close_timeout
    if timeout is None:
        return None
    return max(0.0, timeout.total_seconds() - spec.harness.ready_timeout_s - BOX_START_S)


def beat_box_wait() -> None:
    """The provision waits for a box: say so now (the server keeps the details)."""
    activity.logger.info("provision waits for room under the worker's box caps")
    activity.heartbeat(contract.BOX_WAIT)
