"""Episodes with a reuse key park their box on the worker; the next one leases it."""

from __future__ import annotations

import asyncio
import uuid

from episodes.client import EpisodesClient
from tests.support.helpers import spec


async def test_second_episode_with_the_same_key_reuses_the_box(client, worker) -> None:
    s = spec(name=f"pool-{uuid.uuid4().hex[:6]}", reuse_key="{task.id}")
    ec = EpisodesClient(client, task_queue="episodes-test")
    before = worker.pools.stats
    first = await ec.run_episode(s, s.tasks[0], sample=0)
    second = await ec.run_episode(s, s.tasks[0], sample=1)
    assert (first.termination, second.termination) == ("env_done", "env_done")
    assert (first.pool_hit, second.pool_hit) == (False, True)
    after = worker.pools.stats
    assert after.hits - before.hits == 1
    assert after.misses - before.misses == 1
    assert after.idle >= 1  # parked again after the second episode


async def test_no_reuse_key_means_no_pool(client, worker) -> None:
    s = spec(name=f"nopool-{uuid.uuid4().hex[:6]}")
    result = await EpisodesClient(client, task_queue="episodes-test").run_episode(s, s.tasks[0])
    assert result.pool_hit is None


async def test_episodes_of_a_spec_with_warm_boxes_claim_them(client, worker) -> None:
    # The first provision of a config is cold and starts the filling; the later ones
    # claim boxes started ahead of them (each fresh: tests/episodes/runtimes/pool/test_warm.py).
    s = spec(name=f"warm-{uuid.uuid4().hex[:6]}", pool={"warm": 2, "ttl_s": 30})
    ec = EpisodesClient(client, task_queue="episodes-test")
    before = worker.pools.warm_stats
    first = await ec.run_episode(s, s.tasks[0], sample=0)
    assert first.termination == "env_done" and first.pool_hit is None
    await until(lambda: worker.pools.warm_stats.ready >= 2)
    results = [await ec.run_episode(s, s.tasks[0], sample=i) for i in (1, 2, 3)]
    assert [r.termination for r in results] == ["env_done"] * 3
    after = worker.pools.warm_stats
    assert after.claimed - before.claimed >= 3
    assert after.cold - before.cold >= 1


async def until(predicate) -> None:  # type: ignore[no-untyped-def]
    async def poll() -> None:
        while not predicate():
            await asyncio.sleep(0.05)

    await asyncio.wait_for(poll(), 60)
