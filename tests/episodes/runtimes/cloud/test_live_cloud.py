"""Live round trips on the real clouds: run only with credentials, else skipped with why.

Each test makes one real sandbox/VM (python:3.11-slim; E2B: its `base` template), runs a line-echo
process through stdin/stdout, closes stdin, signals a second process, and stops the
box. The box is stopped in `finally`, so a failing assertion leaves nothing running.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Any

import pytest

from episodes.runtimes.base import Runtime
from episodes.runtimes.selfcheck import kit as selfcheck_kit
from episodes.runtimes.selfcheck.kit import LINE_ECHO, SLEEPER
from episodes.types.runtime import E2BConfig, ModalConfig, PrimeConfig

pytestmark = pytest.mark.live

PYTHON = ["python3", "-u"]
START_S = 600.0  # a cold image pull or VM boot
T = 120.0


async def within(aw: Any, timeout: float = T) -> Any:
    return await asyncio.wait_for(aw, timeout)


async def read_line(stream: Any) -> bytes:
    return await selfcheck_kit.read_line(stream, T)


async def round_trip(runtime: Runtime) -> None:
    try:
        await within(runtime.start(), START_S)
        assert await runtime.alive()
        echo = await within(runtime.open_process([*PYTHON, "-c", LINE_ECHO], env={"X": "1"}))
        assert isinstance(echo.pid, int)
        await echo.write(b"hello\n")
        assert await read_line(echo.stdout) == b"HELLO\n"
        await echo.write(b"again\n")
        assert await read_line(echo.stdout) == b"AGAIN\n"
        await echo.close_stdin()
        assert await within(echo.stdout.read()) == b""
        assert await within(echo.stderr.read()) == b"stdin closed\n"
        assert await within(echo.wait()) == 0

        sleeper = await within(runtime.open_process([*PYTHON, "-c", SLEEPER]))
        assert await read_line(sleeper.stdout) == b"ready\n"
        await within(sleeper.terminate())
        assert await within(sleeper.wait()) == -15
    finally:
        await within(runtime.stop())
    assert not await runtime.alive()


def labels() -> dict[str, str]:
    return {"purpose": "episodes-live-test", "run": uuid.uuid4().hex[:10]}


async def test_modal_live_round_trip() -> None:
    if not os.environ.get("MODAL_TOKEN_ID"):
        pytest.skip("MODAL_TOKEN_ID not set: live Modal test skipped")
    from episodes.runtimes.cloud.modal import ModalRuntime

    await round_trip(ModalRuntime(ModalConfig(timeout_s=900), labels=labels()))


async def test_prime_live_round_trip() -> None:
    if not os.environ.get("PRIME_API_KEY"):
        pytest.skip("PRIME_API_KEY not set: live Prime test skipped")
    from episodes.runtimes.cloud.prime import PrimeRuntime

    await round_trip(PrimeRuntime(PrimeConfig(timeout_minutes=15), labels=labels()))


async def test_e2b_live_round_trip() -> None:
    if not os.environ.get("E2B_API_KEY"):
        pytest.skip("E2B_API_KEY not set: live E2B test skipped")
    from episodes.runtimes.cloud.e2b import E2BRuntime

    await round_trip(E2BRuntime(E2BConfig(timeout_s=900), labels=labels()))
