"""One RuntimePool per distinct pool setting in the specs a worker serves.

Reuse is per worker: an episode that lands on a worker without a parked box for
its key simply provisions a fresh one (a miss), it never waits for another worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from episodes.runtimes.pool.runtime_pool import PoolStats, RuntimePool, RuntimePoolConfig
from episodes.types.spec import PoolSpec

log = logging.getLogger("episodes.worker")


class WorkerPools:
    def __init__(self, *, max_ttl_s: float | None = None, max_idle: int | None = None) -> None:
        # The worker's caps (settings pool_ttl_s, pool_max_idle) on what a spec asks for.
        self.max_ttl_s = max_ttl_s
        self.max_idle = max_idle
        self._pools: dict[PoolSpec, RuntimePool] = {}
        self._lock = asyncio.Lock()
        # A pool runs its TTL sweeper while entered; `close` exits every pool.
        self._entered = contextlib.AsyncExitStack()

    async def get(self, spec: PoolSpec) -> RuntimePool:
        pool = self._pools.get(spec)
        if pool is not None:
            return pool
        async with self._lock:
            if spec not in self._pools:
                ttl = min(spec.ttl_s, self.max_ttl_s or spec.ttl_s)
                idle = spec.max_idle if self.max_idle is None else min(spec.max_idle, self.max_idle)
                pool = RuntimePool(RuntimePoolConfig(ttl_s=ttl, max_idle=idle))
                self._pools[spec] = await self._entered.enter_async_context(pool)
            return self._pools[spec]

    async def close(self) -> None:
        """Stop every pool's idle boxes. The worker is shutting down: a pool that fails
        to close is logged, and the others are closed all the same."""
        self._pools = {}
        entered, self._entered = self._entered, contextlib.AsyncExitStack()
        try:
            await entered.aclose()
        except Exception:
            log.exception("closing the runtime pools failed")

    @property
    def stats(self) -> PoolStats:
        total = PoolStats()
        for pool in self._pools.values():
            s = pool.stats
            for field in PoolStats.model_fields:
                setattr(total, field, getattr(total, field) + getattr(s, field))
        return total
