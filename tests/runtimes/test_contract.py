"""The runtime contract (`episodes.runtimes.contract`), run against every backend in
tests/runtimes/backends/: one test per check and backend."""

from __future__ import annotations

from types import ModuleType

import pytest

from episodes.runtimes import contract
from episodes.runtimes.base import Runtime


async def _run(check: contract.Check, box: Runtime, backend: ModuleType) -> None:
    try:
        await check(contract.Subject(box, backend.PYTHON, getattr(backend, "kill_box", None)))
    except contract.Skipped as e:
        pytest.skip(f"{backend.NAME}: {e}")


@pytest.mark.parametrize("check", contract.SHARED_CHECKS, ids=lambda c: c.__name__)
async def test_shared_box(check: contract.Check, shared_box: Runtime, backend: ModuleType) -> None:
    await _run(check, shared_box, backend)


@pytest.mark.parametrize("check", contract.FRESH_CHECKS, ids=lambda c: c.__name__)
async def test_fresh_box(check: contract.Check, box: Runtime, backend: ModuleType) -> None:
    await _run(check, box, backend)
