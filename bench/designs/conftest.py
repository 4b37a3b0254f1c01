"""Fixtures for the design property tests: a real tuned dev server for the session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def dev_server() -> Iterator[object]:
    from bench.common import dev_server as start

    with start() as server:
        yield server


@pytest.fixture(scope="session")
async def client(dev_server):  # type: ignore[no-untyped-def]
    from episodes.client.connect import connect

    return await connect(dev_server.address, timeout_s=30)
