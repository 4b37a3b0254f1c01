"""One RuntimePool per distinct pool setting in the specs a worker serves, and one
WarmPool per box config whose specs ask for warm boxes (`pool.warm`).

Reuse is per worker: an episode that lands on a worker without a parked box for
its key simply provisions a fresh one (a miss), it never waits for another worker.
Warm boxes are per worker too: a worker keeps them for the configs it has served.
The worker's caps on the boxes its episodes hold (`box_caps`) are here too, as `caps`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping

from episodes.runtimes.caps import BoxCaps
from episodes.runtimes.pool.runtime_pool import PoolStats, RuntimePool, RuntimePoolConfig
from episodes.runtimes.pool.warm import WarmBoxes, WarmPool, WarmStats
from episodes.types.runtime import BoxCap, RuntimeConfig
from episodes.types.spec import PoolSpec

log = logging.getLogger("episodes.worker")


class WorkerPools:
    def __init__(
        self,
        *,
        max_ttl_s: float | None = None,
        max_idle: int | None = None,
        max_warm: int | None = None,
        box_caps: Mapping[str, BoxCap] | None = None,
    ) -> None:
        # The worker's caps (settings pool_ttl_s, pool_max_idle, pool_max_warm) on what
        # a spec asks for.
        self.max_ttl_s = max_ttl_s
        self.max_idle = max_idle
        self.max_warm = max_warm
        # Per runtime: boxes starting and held at once (setting box_caps).
        self.caps = BoxCaps(box_caps)
        self._pools: dict[PoolSpec, RuntimePool] = {}
        self._warm: dict[str, WarmPool] = {}  # by the box config (its JSON)
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

    def warm_boxes(self, spec: PoolSpec) -> WarmBoxes | None:
        """The warm boxes a spec's pool asks for, capped by the worker; None for none."""
        size = spec.warm if self.max_warm is None else min(spec.warm, self.max_warm)
        if size <= 0:
            return None
        return WarmBoxes(self, size, min(spec.ttl_s, self.max_ttl_s or spec.ttl_s))

    def warm_pool(
        self, config: RuntimeConfig, size: int, ttl_s: float, labels: dict[str, str]
    ) -> WarmPool:
        """The warm pool of `config`, made on first demand; it grows to the largest size
        and the shortest TTL its specs ask for."""
        key = config.model_dump_json()
        pool = self._warm.get(key)
        if pool is None:
            pool = self._warm[key] = WarmPool(config, size, ttl_s=ttl_s, labels=labels)
        else:
            pool.size, pool.ttl_s = max(pool.size, size), min(pool.ttl_s, ttl_s)
        return pool

    @property
    def warm_stats(self) -> WarmStats:
        total = WarmStats()
        for pool in self._warm.values():
            s = pool.stats
            for field in WarmStats.model_fields:
                setattr(total, field, getattr(total, field) + getattr(s, field))
        return total

    async def close(self) -> None:
        """Stop every pool's idle boxes. The worker is shutting down: a pool that fails
        to close is logged, and the others are closed all the same."""
        warm, self._warm = list(self._warm.values()), {}
        for pool in warm:
            try:
                await pool.close()
            except Exception:
                log.exception("closing a warm pool failed")
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
