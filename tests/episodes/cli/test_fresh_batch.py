"""`--fresh`'s new batch id, over which batches already have episodes (the count the
server answers, stood in by a set): a name that ends in a number of its own stays
whole. Before, `again-544533` (a test's random name, all digits) became `again-2`, and a
spec named `run-2024` would have run as `run-2`."""

from __future__ import annotations

import pytest

from episodes.cli import run
from episodes.client.batch.server import episodes_query


@pytest.mark.parametrize(
    ("existing", "given", "fresh"),
    [
        (set(), "tutorial", "tutorial"),
        ({"tutorial"}, "tutorial", "tutorial-2"),
        ({"tutorial", "tutorial-2"}, "tutorial", "tutorial-3"),
        ({"tutorial", "tutorial-2"}, "tutorial-2", "tutorial-3"),
        ({"again-544533"}, "again-544533", "again-544533-2"),
        ({"again-544533", "again-544533-2"}, "again-544533", "again-544533-3"),
        ({"run-2024"}, "run-2024", "run-2024-2"),
    ],
)
async def test_fresh_batch_ids(monkeypatch, existing, given, fresh) -> None:
    counts = {episodes_query(b): 4 for b in existing}

    async def count(client, query: str) -> int:
        return counts.get(query, 0)

    monkeypatch.setattr(run, "_count", count)
    assert await run.fresh_batch(None, given) == fresh  # type: ignore[arg-type]
