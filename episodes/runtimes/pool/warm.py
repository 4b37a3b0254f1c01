"""Warm pools: boxes of one runtime config started ahead of demand, so that a
provision claims a ready box instead of starting one.

A `WarmPool` keeps `size` boxes of its config started and never used. `claim()` hands
over the oldest ready box that is alive, and the pool refills behind it. The claimer
owns the box from then on: it is stopped at the episode's end (or parked under a
reuse key, when the spec asks for reuse), never given back here, so a claimed box
holds its image's state and nothing of another episode.

- `claim()` never waits for a box still starting: with none ready it answers None
  and the caller starts a box itself (a cold start), as a reuse-pool miss does.
- A ready box older than `ttl_s` is replaced: a cloud box's own timeout counts from
  its creation, so a box kept warm for hours would die under its episode.
- On demand: the pool starts filling at its first claim, and a pool with no claim for
  `ttl_s` stops its boxes and fills no more until the next claim. A config nobody
  runs any more costs nothing.
- A box that fails to start is logged and the next attempt waits (1 s, doubling up to
  60 s): a runtime that is unavailable does not spin.

`WarmBoxes` is what a session holds: the worker's warm pools (`worker_pools`) with the
size and TTL its spec asked for (capped by the worker), keyed by the box config.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

from pydantic import BaseModel

from episodes.runtimes import make_runtime
from episodes.runtimes.base import Runtime
from episodes.types.runtime import RuntimeConfig

log = logging.getLogger(__name__)

RuntimeFactory = Callable[..., Runtime]
BACKOFF_S = (1.0, 60.0)  # the first wait after a failed start, and the longest


class WarmStats(BaseModel):
    """Counters for the worker's status and metrics."""

    ready: int = 0
    starting: int = 0
    claimed: int = 0  # claims that got a ready box
    cold: int = 0  # claims that found none (the caller started a box)
    started: int = 0  # boxes started ahead of demand
    failed: int = 0  # starts that failed
    retired: int = 0  # ready boxes stopped unused (expired, dead, idle pool, closed)


class WarmPool:
    """`size` started boxes of `config`, claimed once each. See the module docstring."""

    def __init__(
        self,
        config: RuntimeConfig,
        size: int,
        *,
        ttl_s: float = 600.0,
        labels: dict[str, str] | None = None,
        factory: RuntimeFactory = make_runtime,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.size = size
        self.ttl_s = ttl_s
        self._labels = dict(labels or {})
        self._factory = factory
        self._clock = clock
        self._ready: deque[tuple[Runtime, float]] = deque()  # oldest first
        self._starting = 0
        self._wake = asyncio.Event()
        self._last_claim = clock()
        self._filler: asyncio.Task[None] | None = None
        self._stopping: set[asyncio.Task[None]] = set()
        self._closed = False
        self._stats = WarmStats()

    @property
    def stats(self) -> WarmStats:
        return self._stats.model_copy(
            update={"ready": len(self._ready), "starting": self._starting}
        )

    async def claim(self) -> Runtime | None:
        """A ready box, now the caller's; None when none is ready (start one yourself)."""
        if self._closed:
            return None
        self._last_claim = self._clock()
        if self._filler is None:
            self._filler = asyncio.create_task(self._fill_forever(), name="warm-pool-filler")
        try:
            while self._ready:
                runtime, since = self._ready.popleft()
                if self._clock() - since < self.ttl_s and await self._alive(runtime):
                    self._stats.claimed += 1
                    return runtime
                self._retire(runtime)
            self._stats.cold += 1
            return None
        finally:
            self._wake.set()  # refill behind the claim

    async def close(self) -> None:
        """Stop filling and stop every ready box; boxes already claimed are the claimers'."""
        self._closed = True
        if self._filler is not None:
            self._filler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._filler
            self._filler = None
        while self._ready:
            self._retire(self._ready.popleft()[0])
        while self._stopping:
            await asyncio.gather(*list(self._stopping), return_exceptions=True)

    # -- internals ----------------------------------------------------------------

    async def _alive(self, runtime: Runtime) -> bool:
        if runtime.stopped:
            return False
        try:
            return await runtime.alive()
        except asyncio.CancelledError:
            self._retire(runtime)
            raise
        except Exception as e:
            log.warning("a warm box of %s failed its check (%s); replacing it", runtime.id, e)
            return False

    def _retire(self, runtime: Runtime) -> None:
        """Stop an unused box in the background (shielded from the caller's cancellation)."""
        self._stats.retired += 1
        task = asyncio.ensure_future(_stop_quietly(runtime))
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)

    def _retire_expired(self) -> None:
        now = self._clock()
        while self._ready and now - self._ready[0][1] >= self.ttl_s:
            self._retire(self._ready.popleft()[0])

    async def _fill_forever(self) -> None:
        backoff = 0.0
        check_s = min(self.ttl_s / 4, 30.0)
        while not self._closed:
            self._wake.clear()
            self._retire_expired()
            if self._clock() - self._last_claim >= self.ttl_s:
                # Nobody claimed for a TTL: give the boxes back until the next claim.
                while self._ready:
                    self._retire(self._ready.popleft()[0])
                await self._wake.wait()
                continue
            want = self.size - len(self._ready) - self._starting
            if want > 0:
                started = await asyncio.gather(*(self._start_one() for _ in range(want)))
                if all(started):
                    backoff = 0.0
                    continue
                backoff = min(max(backoff * 2, BACKOFF_S[0]), BACKOFF_S[1])
                await asyncio.sleep(backoff)  # a claim meanwhile does not cut it short
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), check_s)

    async def _start_one(self) -> bool:
        runtime = self._factory(self.config, labels=self._labels)
        self._starting += 1
        try:
            await runtime.start()
        except asyncio.CancelledError:
            await asyncio.shield(_stop_quietly(runtime))
            raise
        except Exception as e:
            self._stats.failed += 1
            log.warning("a warm box of %s could not start: %s", self.config.type, e)
            await asyncio.shield(_stop_quietly(runtime))
            return False
        finally:
            self._starting -= 1
        if self._closed:
            await asyncio.shield(_stop_quietly(runtime))
        else:
            self._ready.append((runtime, self._clock()))
            self._stats.started += 1
        return True


async def _stop_quietly(runtime: Runtime) -> None:
    try:
        await runtime.stop()
    except Exception:
        log.exception("stopping warm box %s failed", runtime.id)


class WarmSource(Protocol):
    """Where `WarmBoxes` finds the pool of a config (the worker's `WorkerPools`)."""

    def warm_pool(
        self, config: RuntimeConfig, size: int, ttl_s: float, labels: dict[str, str]
    ) -> WarmPool: ...


class WarmBoxes:
    """A session's handle on the worker's warm pools, sized by its spec."""

    def __init__(self, source: WarmSource, size: int, ttl_s: float) -> None:
        self._source = source
        self.size = size
        self.ttl_s = ttl_s

    async def claim(self, config: RuntimeConfig, labels: dict[str, str]) -> Runtime | None:
        """A ready box of `config`, or None (start one). A warm box is made before any
        episode wants it, so it carries only the labels that name no episode."""
        owner = {k: v for k, v in labels.items() if k not in ("session", "workflow")}
        return await self._source.warm_pool(config, self.size, self.ttl_s, owner).claim()
