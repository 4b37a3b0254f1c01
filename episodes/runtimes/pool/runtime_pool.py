"""A keyed pool of live runtimes, so consecutive episodes can reuse one box.

`lease(key, config)` hands back the idle box parked under `key` when its config is
equal, it is not stopped, it has been idle less than `ttl_s` and `alive()` says so;
otherwise the stale box is stopped and a fresh one is built and started. A normal
exit parks the box once `sweep()` ended every process the episode left in it; an
exception (cancellation included), a box the caller stopped, a box that could not
be swept clean or a closed pool stops it instead.

- One box never hosts two episodes at once: a lease of a key that is leased (or
  being parked) is a miss, a fresh box of its own, never a wait. Leases are taken
  inside the provision activity, holding its slot: waiting there serialized the
  samples of one task until they timed out (issue 19). When such a box ends, it is
  parked if its key is free by then and has no parked box, else stopped.
- Reuse is a cache, never a correctness dependency: any miss provisions fresh. The
  key asserts "same world"; config equality only guards against drift.
- Each worker owns its own pool and Temporal does not route by key, so reuse
  across workers is best-effort.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from pydantic import BaseModel, Field

from episodes.errors import PoolClosed
from episodes.runtimes import make_runtime
from episodes.runtimes.base import Runtime
from episodes.runtimes.pool.reuse import render_reuse_key
from episodes.types.runtime import RuntimeConfig

__all__ = [
    "PoolClosed",
    "PoolStats",
    "RuntimeLease",
    "RuntimePool",
    "RuntimePoolConfig",
    "render_reuse_key",
]

log = logging.getLogger(__name__)

RuntimeFactory = Callable[..., Runtime]
# Where a miss may get a started box instead of starting one (a warm pool's claim).
Claim = Callable[[], Awaitable[Runtime | None]]


class RuntimePoolConfig(BaseModel):
    ttl_s: float = Field(600.0, gt=0)
    max_idle: int = Field(16, ge=0)


class PoolStats(BaseModel):
    """Counters for run summaries and worker metrics."""

    hits: int = 0
    misses: int = 0
    idle: int = 0
    leased: int = 0
    stopped: int = 0  # boxes the pool retired (stale, evicted, expired, failed, closed)


@dataclass
class _Idle:
    runtime: Runtime
    config: RuntimeConfig
    since: float


@dataclass
class _KeyLock:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0  # holders plus waiters; the entry is dropped at zero


class RuntimeLease:
    """One lease of a key; an async context manager yielding the box.

    After entering, `hit` says whether the box was reused and `runtime` is the box.
    It may be entered in one activity and exited in another (same event loop).
    """

    def __init__(
        self,
        pool: RuntimePool,
        key: str,
        config: RuntimeConfig,
        labels: dict[str, str] | None,
        claim: Claim | None = None,
    ) -> None:
        self.key = key
        self.config = config
        self.hit = False
        self.runtime: Runtime | None = None
        self._pool = pool
        self._labels = labels
        self._claim = claim
        self._state = "new"  # new -> entered -> exited

    async def __aenter__(self) -> Runtime:
        if self._state != "new":
            raise RuntimeError("a RuntimeLease can be entered only once")
        self._state = "entering"
        try:
            self.runtime, self.hit = await self._pool._acquire(
                self.key, self.config, self._labels, self._claim
            )
        except BaseException:
            self._state = "exited"
            raise
        self._state = "entered"
        return self.runtime

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        if self._state != "entered":
            return
        self._state = "exited"
        assert self.runtime is not None
        await self._pool._release(self.key, self.config, self.runtime, failed=exc_type is not None)


class RuntimePool:
    """Live boxes kept between leases, at most one per key. See the module docstring.

    `async with pool:` runs the TTL sweeper and closes the pool on exit.
    """

    def __init__(
        self,
        config: RuntimePoolConfig | None = None,
        *,
        factory: RuntimeFactory = make_runtime,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config or RuntimePoolConfig()
        self._factory = factory
        self._clock = clock
        self._idle: OrderedDict[str, _Idle] = OrderedDict()  # oldest parked first
        self._leased: dict[str, Runtime] = {}  # the key's holder
        self._extra: set[Runtime] = set()  # leased while their key was busy
        self._locks: dict[str, _KeyLock] = {}
        self._stopping: set[asyncio.Task[None]] = set()
        self._sweeper: asyncio.Task[None] | None = None
        self._closed = False
        self._hits = 0
        self._misses = 0
        self._stopped = 0

    # -- public API ---------------------------------------------------------------

    def lease(
        self,
        key: str,
        config: RuntimeConfig,
        *,
        labels: dict[str, str] | None = None,
        claim: Claim | None = None,
    ) -> RuntimeLease:
        """`async with pool.lease(key, config) as box:`; the box is reused or fresh.
        `claim`: on a miss, try it first for a started box (a warm pool's)."""
        return RuntimeLease(self, key, config, labels, claim)

    async def discard(self, key: str) -> None:
        """Stop the box under `key` now, after its live lease (if any) ends. Idempotent."""
        async with self._key_lock(key):
            entry = self._idle.pop(key, None)
            if entry is not None:
                await self._stop(entry.runtime)

    async def close(self) -> None:
        """Stop every idle box and refuse new leases; boxes still leased stop on release."""
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        victims = [entry.runtime for entry in self._idle.values()]
        self._idle.clear()
        await asyncio.gather(*(self._stop(runtime) for runtime in victims))
        # Stops started by cancelled callers keep running in the background; finish them.
        while self._stopping:
            await asyncio.gather(*list(self._stopping), return_exceptions=True)

    async def sweep(self) -> int:
        """Stop idle boxes older than the TTL; returns how many. The sweeper calls this."""
        now = self._clock()
        expired = [k for k, e in self._idle.items() if now - e.since >= self.config.ttl_s]
        victims = [self._idle.pop(k).runtime for k in expired]
        await asyncio.gather(*(self._stop(runtime) for runtime in victims))
        return len(victims)

    @property
    def stats(self) -> PoolStats:
        return PoolStats(
            hits=self._hits,
            misses=self._misses,
            idle=len(self._idle),
            leased=len(self._leased) + len(self._extra),
            stopped=self._stopped,
        )

    @property
    def closed(self) -> bool:
        return self._closed

    async def __aenter__(self) -> RuntimePool:
        if self._closed:
            raise PoolClosed("the runtime pool is closed")
        if self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep_forever(), name="runtime-pool-sweeper")
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- internals ----------------------------------------------------------------

    async def _acquire(
        self, key: str, config: RuntimeConfig, labels: dict[str, str] | None, claim: Claim | None
    ) -> tuple[Runtime, bool]:
        if self._closed:
            raise PoolClosed(f"the runtime pool is closed; cannot lease {key!r}")
        if not await self._try_lock(key):
            # Busy: a miss, not a wait (see the module docstring).
            self._misses += 1
            runtime = await self._start_fresh(config, labels, claim)
            self._extra.add(runtime)
            return runtime, False
        try:
            entry = self._idle.pop(key, None)
            if entry is not None and await self._reusable(entry, config):
                self._leased[key] = entry.runtime
                self._hits += 1
                return entry.runtime, True
            if entry is not None:
                await self._stop(entry.runtime)
            self._misses += 1
            runtime = await self._start_fresh(config, labels, claim)
            self._leased[key] = runtime
            return runtime, False
        except BaseException:
            self._unlock(key)
            raise

    async def _start_fresh(
        self, config: RuntimeConfig, labels: dict[str, str] | None, claim: Claim | None = None
    ) -> Runtime:
        claimed = await claim() if claim is not None else None
        if claimed is not None:
            return claimed
        runtime = self._factory(config, labels=labels)
        try:
            await runtime.start()
        except BaseException:
            await self._stop(runtime)
            raise
        return runtime

    async def _reusable(self, entry: _Idle, config: RuntimeConfig) -> bool:
        if entry.config != config or entry.runtime.stopped:
            return False
        if self._clock() - entry.since >= self.config.ttl_s:
            return False
        try:
            return await entry.runtime.alive()
        except asyncio.CancelledError:
            await self._stop(entry.runtime)
            raise
        except Exception:
            log.warning("alive() failed for pooled box %s; replacing it", entry.runtime.id)
            return False

    async def _release(self, key: str, config: RuntimeConfig, runtime: Runtime, *, failed: bool):
        if runtime in self._extra:
            # Leased while its key was busy: it may take the key's place only if the key
            # is free now and nothing is parked under it (one box per key).
            self._extra.discard(runtime)
            if failed or key in self._idle or not await self._try_lock(key):
                await self._stop(runtime)
                return
        self._leased.pop(key, None)
        victims: list[Runtime] = []
        try:
            if failed or runtime.stopped or self._closed or not await self._swept(runtime):
                # The key stays locked until its own box is gone, so a key never has two.
                await self._stop(runtime)
                return
            self._idle[key] = _Idle(runtime, config, self._clock())
            self._idle.move_to_end(key)
            while len(self._idle) > self.config.max_idle:
                victims.append(self._idle.popitem(last=False)[1].runtime)
        finally:
            self._unlock(key)
        # Evicted boxes belong to other, unlocked keys: stop them without holding any lock.
        await asyncio.gather(*(self._stop(victim) for victim in victims))

    async def _swept(self, runtime: Runtime) -> bool:
        """End what the episode left running in the box; False if it may not be parked.

        A harness's leftovers (a server it spawned, a daemon) must not act in the next
        episode's box, so a box that cannot be swept clean is stopped (issue 11).
        """
        try:
            clean = await runtime.sweep()
        except asyncio.CancelledError:
            await self._stop(runtime)
            raise
        except Exception:
            log.exception("sweeping pooled box %s failed; stopping it", runtime.id)
            return False
        if not clean:
            log.warning("pooled box %s is not clean after its episode; stopping it", runtime.id)
        return clean

    async def _stop(self, runtime: Runtime) -> None:
        """Stop a box, shielded: a cancelled caller must not leave it half-stopped."""
        self._stopped += 1
        task = asyncio.ensure_future(self._stop_quietly(runtime))
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)
        await asyncio.shield(task)

    @staticmethod
    async def _stop_quietly(runtime: Runtime) -> None:
        try:
            await runtime.stop()
        except Exception:
            # The box is already out of the pool; a failed stop must not mask the caller's error.
            log.exception("stopping runtime %s failed", runtime.id)

    async def _sweep_forever(self) -> None:
        interval = min(self.config.ttl_s / 4, 30.0)
        while True:
            await asyncio.sleep(interval)
            try:
                await self.sweep()
            except Exception:
                log.exception("runtime pool sweep failed")

    async def _try_lock(self, key: str) -> bool:
        """Take the key if nobody holds or waits for it; False at once otherwise.

        A key has an entry exactly while it has users, so a missing entry means a fresh,
        free lock: `_lock` registers it before its first await, and anyone arriving
        meanwhile sees the key busy.
        """
        if key in self._locks:
            return False
        await self._lock(key)
        return True

    async def _lock(self, key: str) -> None:
        entry = self._locks.setdefault(key, _KeyLock())
        entry.users += 1
        try:
            await entry.lock.acquire()
        except BaseException:
            self._drop_user(key, entry)
            raise

    def _unlock(self, key: str) -> None:
        entry = self._locks[key]
        entry.lock.release()
        self._drop_user(key, entry)

    def _drop_user(self, key: str, entry: _KeyLock) -> None:
        entry.users -= 1
        if entry.users == 0 and self._locks.get(key) is entry:
            del self._locks[key]

    @contextlib.asynccontextmanager
    async def _key_lock(self, key: str):
        await self._lock(key)
        try:
            yield
        finally:
            self._unlock(key)
