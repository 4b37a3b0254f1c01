from __future__ import annotations

import pytest

from episodes.runtimes.subprocess import SubprocessRuntime


@pytest.fixture
async def runtime():
    rt = SubprocessRuntime()
    await rt.start()
    yield rt
    await rt.stop()
