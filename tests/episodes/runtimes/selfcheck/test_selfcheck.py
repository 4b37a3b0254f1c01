"""The runtime self-check (`episodes.runtimes.selfcheck.runner`), run against every backend in
tests/support/backends/: one test per check and backend."""

from __future__ import annotations

from types import ModuleType

import pytest

from episodes.runtimes.base import Runtime
from episodes.runtimes.selfcheck import runner as selfcheck


async def _run(check: selfcheck.Check, box: Runtime, backend: ModuleType) -> None:
    try:
        await check(selfcheck.Subject(box, backend.PYTHON, getattr(backend, "kill_box", None)))
    except selfcheck.Skipped as e:
        pytest.skip(f"{backend.NAME}: {e}")


@pytest.mark.parametrize("check", selfcheck.SHARED_CHECKS, ids=lambda c: c.__name__)
async def test_shared_box(check: selfcheck.Check, shared_box: Runtime, backend: ModuleType) -> None:
    await _run(check, shared_box, backend)


@pytest.mark.parametrize("check", selfcheck.FRESH_CHECKS, ids=lambda c: c.__name__)
async def test_fresh_box(check: selfcheck.Check, box: Runtime, backend: ModuleType) -> None:
    await _run(check, box, backend)
