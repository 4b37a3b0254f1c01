"""Episodes with a reuse key park their box on the worker; the next one leases it."""

from __future__ import annotations

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
