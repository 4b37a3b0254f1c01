"""Fixtures for every test (tests/conftest.py loads this module): `runtime`, a started
local subprocess box whose workdir must be gone once it stops."""

from __future__ import annotations

import os

import pytest

from episodes.runtimes.subprocess import SubprocessRuntime


@pytest.fixture
async def runtime():
    rt = SubprocessRuntime()
    await rt.start()
    yield rt
    await rt.stop()
    assert rt.workdir is not None and not os.path.exists(rt.workdir)
