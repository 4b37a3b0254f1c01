"""Fixtures for the runtime self-check: one suite, parametrized over every backend.

A backend is a module in `tests/support/backends/` (add one there; nothing here
changes) that defines:

    NAME: str                         # test id, e.g. "docker"
    PYTHON: list[str]                 # argv prefix that runs python inside the box
    def skip_reason() -> str | None   # why this backend cannot run here, or None
    def make_runtime() -> Runtime     # a fresh, unstarted box

and optionally:

    def kill_box(runtime) -> None     # destroy the box from outside (alive() test)
    def leftovers() -> list[str]      # boxes of this test run still present (checked at the end)

EPISODES_REQUIRE=docker,subprocess turns a skip of those backends into a failure (CI
sets it, so a broken engine or image build cannot pass as "skipped").
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from types import ModuleType

import pytest

from episodes.runtimes.base import Runtime
from tests.support import backends

BACKENDS = backends.discover()


@pytest.fixture(scope="module", params=BACKENDS, ids=[m.NAME for m in BACKENDS])
def backend(request: pytest.FixtureRequest) -> ModuleType:
    backends.require(request.param)
    return request.param


@pytest.fixture
async def box(backend: ModuleType) -> AsyncIterator[Runtime]:
    """A fresh box for tests that stop or break it."""
    runtime = backend.make_runtime()
    await runtime.start()
    try:
        yield runtime
    finally:
        await runtime.stop()


@pytest.fixture(scope="module")
async def shared_box(backend: ModuleType) -> AsyncIterator[Runtime]:
    """One box per backend for the tests that only run processes in it (boxes are slow
    to make on some backends: a container on vfs storage copies its whole image)."""
    runtime = backend.make_runtime()
    await runtime.start()
    try:
        yield runtime
    finally:
        await runtime.stop()


@pytest.fixture(scope="session", autouse=True)
def no_leftover_boxes() -> Iterator[None]:
    yield
    leaks = {}
    for mod in backends.used:
        finder = getattr(mod, "leftovers", None)
        if finder is not None:
            with contextlib.suppress(Exception):
                found = finder()
                if found:
                    leaks[mod.NAME] = found
    assert not leaks, f"boxes left behind by this test run: {leaks}"
