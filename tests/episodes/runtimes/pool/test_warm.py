"""WarmPool over real subprocess boxes: boxes started ahead of demand, claimed once each.

The TTL is driven by an injected clock; waits are on conditions, never on time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from episodes.runtimes.pool.warm import WarmPool
from episodes.runtimes.pool.worker_pools import WorkerPools
from episodes.types.runtime import SubprocessConfig
from episodes.types.spec import PoolSpec
from tests.episodes.runtimes.pool.test_pool import Box, Clock, Factory

CFG = SubprocessConfig(isolation="none")
T = 30.0


async def until(predicate: Callable[[], bool]) -> None:
    async def poll() -> None:
        while not predicate():
            await asyncio.sleep(0.01)

    await asyncio.wait_for(poll(), T)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def factory():
    made = Factory()
    yield made
    await asyncio.gather(*(box.stop() for box in made.made))


def ready(pool: WarmPool) -> int:
    return pool.stats.ready


async def test_first_claim_is_cold_then_the_pool_fills_and_claims_are_warm(factory, clock):
    pool = WarmPool(CFG, 2, factory=factory, clock=clock)
    try:
        assert await pool.claim() is None  # nothing is started before the first demand
        await until(lambda: ready(pool) == 2)
        first = await pool.claim()
        assert isinstance(first, Box) and first._started and not first.stopped
        await until(lambda: ready(pool) == 2)  # refilled behind the claim
        second = await pool.claim()
        assert second is not None and second is not first
        stats = pool.stats
        assert (stats.claimed, stats.cold) == (2, 1)
        assert stats.started == stats.claimed + stats.ready + stats.retired  # none lost
    finally:
        await pool.close()
    # The claimed boxes are the claimers': close stops only the unused ones.
    assert not first.stopped and not second.stopped
    assert all(b.stopped for b in factory.made if b not in (first, second))


async def test_a_claimed_box_is_never_handed_out_again(factory, clock):
    pool = WarmPool(CFG, 3, factory=factory, clock=clock)
    try:
        await pool.claim()
        await until(lambda: ready(pool) == 3)
        claimed = await asyncio.gather(*(pool.claim() for _ in range(3)))
        assert None not in claimed and len({id(b) for b in claimed}) == 3
        # What a claimer does in its box stays there: the next claim is a fresh box.
        Path(claimed[0].workdir, "episode-file").write_text("mine")
        await until(lambda: ready(pool) == 3)
        nxt = await pool.claim()
        assert nxt is not None and nxt not in claimed
        assert not Path(nxt.workdir, "episode-file").exists()
    finally:
        await pool.close()


async def test_a_dead_or_expired_box_is_replaced_not_handed_out(factory, clock):
    pool = WarmPool(CFG, 2, ttl_s=60, factory=factory, clock=clock)
    try:
        await pool.claim()
        await until(lambda: ready(pool) == 2)
        sick, well = [b for b in factory.made if b._started and not b.stopped][:2]
        sick.sick = True
        got = await pool.claim()
        assert got is well
        await until(lambda: sick.stopped)
        # Ready boxes past the TTL (a cloud box's own timeout counts from its start).
        await until(lambda: ready(pool) == 2)
        old = [b for b in factory.made if b._started and not b.stopped and b is not well]
        clock.now += 61
        pool._last_claim = clock.now  # still in demand
        got = await pool.claim()
        assert got is None or got not in old
        await until(lambda: all(b.stopped for b in old))
    finally:
        await pool.close()


async def test_a_pool_nobody_claims_gives_its_boxes_back(factory, clock):
    pool = WarmPool(CFG, 2, ttl_s=60, factory=factory, clock=clock)
    try:
        await pool.claim()
        await until(lambda: ready(pool) == 2)
        clock.now += 61  # no claim for a TTL
        pool._wake.set()
        await until(lambda: ready(pool) == 0 and all(b.stopped for b in factory.made))
        made = len(factory.made)
        assert await pool.claim() is None  # demand again: it fills again
        await until(lambda: ready(pool) == 2)
        assert len(factory.made) == made + 2
    finally:
        await pool.close()


async def test_a_box_that_cannot_start_backs_off_and_leaves_nothing(factory, clock, monkeypatch):
    from episodes.runtimes.pool import warm

    monkeypatch.setattr(warm, "BACKOFF_S", (0.01, 0.05))
    factory.fail_next_start = True
    pool = WarmPool(CFG, 1, factory=factory, clock=clock)
    try:
        await pool.claim()
        await until(lambda: ready(pool) == 1)
        assert pool.stats.failed == 1
        assert factory.made[0].stopped  # the failed start's box was stopped
    finally:
        await pool.close()


async def test_the_worker_caps_a_specs_warm_boxes_and_shares_a_pool_per_config(factory):
    pools = WorkerPools(max_warm=2, max_ttl_s=300)
    assert pools.warm_boxes(PoolSpec()) is None  # warm: 0 asks for none
    warm = pools.warm_boxes(PoolSpec(warm=5, ttl_s=900))
    assert warm is not None and (warm.size, warm.ttl_s) == (2, 300)
    assert WorkerPools(max_warm=0).warm_boxes(PoolSpec(warm=5)) is None
    a = pools.warm_pool(CFG, 1, 300, {"worker": "w"})
    assert pools.warm_pool(CFG, 2, 100, {}) is a and (a.size, a.ttl_s) == (2, 100)
    assert pools.warm_pool(SubprocessConfig(), 1, 300, {}) is not a
    await pools.close()


async def test_a_warm_box_carries_no_episodes_labels(factory, clock):
    from episodes.runtimes.pool.warm import WarmBoxes

    class Source:
        def __init__(self) -> None:
            self.pool = WarmPool(CFG, 1, factory=factory, clock=clock)
            self.labels: dict[str, str] = {}

        def warm_pool(self, config, size, ttl_s, labels):  # type: ignore[no-untyped-def]
            self.labels = labels
            return self.pool

    source = Source()
    boxes = WarmBoxes(source, 1, 600)
    try:
        await boxes.claim(CFG, {"worker": "w1", "session": "s", "workflow": "wf"})
        assert source.labels == {"worker": "w1"}
    finally:
        await source.pool.close()


async def test_a_reuse_pool_miss_claims_a_warm_box_and_parks_it_under_its_key(factory, clock):
    from episodes.runtimes.pool.runtime_pool import RuntimePool

    warm = WarmPool(CFG, 1, factory=factory, clock=clock)
    try:
        await warm.claim()
        await until(lambda: ready(warm) == 1)
        (box,) = [b for b in factory.made if b._started and not b.stopped]
        async with RuntimePool(factory=factory, clock=clock) as pool:
            async with pool.lease("k", CFG, claim=warm.claim) as leased:
                assert leased is box  # the miss got the warm box, not a cold start
            async with pool.lease("k", CFG, claim=warm.claim) as again:
                assert again is box  # parked under its key and reused, as any box
            assert pool.stats.hits == 1 and pool.stats.misses == 1
    finally:
        await warm.close()
