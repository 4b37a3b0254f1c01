"""A client-side batch's episodes one by one: `run_batch` without groups.

Every task x sample is a member (`episodes.client.batch.dispatch`), at most `limit`
in flight, each result yielded as its episode ends. The budget (`spec.budget`) is
counted from the results as they come in, every attempt of each (`run_member`), so a restarted trainer re-attaching to the
episodes that finished counts them again and stops where it stopped; past it no more
episodes start and the stream ends once those in flight have. Closing the stream
cancels the episodes it still waits for.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncGenerator

from episodes.client.batch.dispatch import (
    BatchClient,
    Member,
    Outcome,
    cancel_episode,
    dispatch_spec,
    run_member,
)
from episodes.client.batch.spending import Spending
from episodes.types.results import EpisodeResult
from episodes.types.spec import EpisodeSpec


async def stream_results(
    ec: BatchClient, spec: EpisodeSpec, *, batch: str | None, limit: int
) -> AsyncGenerator[EpisodeResult, None]:
    """See the module doc; `ec.budget_exhausted` names the budget reached, if one was."""
    work = deque(Member(t, s) for t in spec.load_tasks() for s in range(spec.samples))
    running: dict[asyncio.Task[Outcome], Member] = {}
    spent = Spending(spec.budget)
    ec.episodes_ran = 0
    try:
        while True:
            while len(running) < limit and work and spent.reached is None:
                m = work.popleft()
                at = dispatch_spec(spec, ec.policy_version, ec.upstreams)
                t = asyncio.create_task(
                    run_member(ec, at, m, batch=batch, budget=spec.batch_retries, spent=spent)
                )
                running[t] = m
            if not running:
                return
            done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                running.pop(t)
                result = t.result().result
                ec.episodes_ran += 1
                if spent.reached:  # counted by run_member, every attempt as it ended
                    ec.budget_exhausted = spent.reached
                yield result
    finally:
        for t in running:
            t.cancel()
        await asyncio.gather(*(cancel_episode(ec.client, m.wid) for m in running.values()))
