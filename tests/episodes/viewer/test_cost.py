"""Cost in the viewer: a batch workflow's page sums it (a card), an episode's page shows
its usage and cost (the API and the first view), under the spec's price table."""

from __future__ import annotations

import uuid

import pytest

from episodes.client.batch.server import batch_input, start_batch, wait_batch
from episodes.words import usd
from tests.support.helpers import spec

pytestmark = pytest.mark.timeout(240)


async def test_batch_and_episode_pages_show_the_cost(client, worker, viewer) -> None:
    name = f"vcost-{uuid.uuid4().hex[:6]}"
    s = spec(
        name=name,
        tasks=[{"id": f"t{i}", "data": {"messages": ["x"], "expected": ["x"]}} for i in range(2)],
        prices={"box_second": {"subprocess": 1000.0}},
    )
    handle = await start_batch(client, batch_input(s, batch_id=name), task_queue="episodes-test")
    result = await wait_batch(client, handle)
    assert result.metrics.cost is not None and result.metrics.priced == 2

    fleet = (await viewer.get("/api/batch", id=name))["fleet"]
    assert fleet["priced"] == 2
    assert fleet["cost"]["box"] == pytest.approx(result.metrics.cost.box)
    page = (await viewer.http.get(f"/batch/{name}")).text
    assert usd(result.metrics.cost.total) in page and "2 episodes priced" in page

    wid = f"{name}.t0.s0"
    r = (await viewer.get("/api/episode", id=wid))["result"]
    assert r["cost"]["box"] > 0 and r["usage"] == {}
    page = (await viewer.http.get(f"/episode/{wid}")).text
    assert "<dt>cost</dt>" in page and "(models $0, boxes $" in page
