"""One RuntimePool per distinct pool setting in the specs this worker serves.

Reuse is per worker: an episode that lands on a worker without a parked box for
its key simply provisions a fresh one (a miss), it never waits for another worker.
"""

from __future__ import annotations

import asyncio

from episodes.runtimes.pool import PoolStats, RuntimePool, RuntimePoolConfig
from episodes.spec import PoolSpec


class WorkerPools:
    def __init__(self) -> None:
        self._pools: dict[PoolSpec, RuntimePool] = {}
        self._lock = asyncio.Lock()

    async def get(self, spec: PoolSpec) -> RuntimePool:
        pool = self._pools.get(spec)
        if pool is not None:
            return pool
        async with self._lock:
            if spec not in self._pools:
                pool = RuntimePool(RuntimePoolConfig(ttl_s=spec.ttl_s, max_idle=spec.max_idle))
                await pool.__aenter__()  # starts its TTL sweeper
                self._pools[spec] = pool
            return self._pools[spec]

    async def close(self) -> None:
        pools, self._pools = list(self._pools.values()), {}
        await asyncio.gather(*(p.close() for p in pools), return_exceptions=True)

    @property
    def stats(self) -> PoolStats:
        total = PoolStats()
        for pool in self._pools.values():
            s = pool.stats
            for field in PoolStats.model_fields:
                setattr(total, field, getattr(total, field) + getattr(s, field))
        return total
