"""The chaos tests' server: a dev server of each module's own (so a test may kill it
without breaking the rest of the suite). Module-scoped and only made for a module that
asks for `chaos_server` or `chaos_client` (tests/conftest.py loads this module)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from episodes.client.devserver import DevServer


@pytest.fixture(scope="module")
def chaos_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    tmp = tmp_path_factory.mktemp("chaos-temporal")
    server = DevServer(
        auto_port=True, headless=True, db_file=tmp / "temporal.db", log_file=tmp / "server.log"
    )
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
async def chaos_client(chaos_server):  # type: ignore[no-untyped-def]
    from episodes.client.connect import connect

    return await connect(chaos_server.address, timeout_s=30)
