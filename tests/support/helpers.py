"""Specs and polling helpers for integration tests."""

from __future__ import annotations

import asyncio
import inspect
import os
import time
from typing import Any

from episodes.types.spec import EpisodeSpec, parse_spec

# The integration tests that cover both turn modes parametrize this (`turn_mode` fixture).
TURN_MODE = "drive"


def spec(
    *,
    env: str = "script",
    command: list[str] | None = None,
    tasks: list[dict[str, Any]] | None = None,
    name: str = "it",
    **over: Any,
) -> EpisodeSpec:
    harness = {
        "command": command or ["{python}", "-m", "episodes.harness.reference.echo"],
        "ready_timeout_s": 5.0,
        "stop_timeout_s": 1.0,
    }
    harness.update(over.pop("harness", {}))
    data = {
        "name": name,
        "env": env,
        "tasks": tasks or [{"id": "t0", "data": {"messages": ["a", "b", "c"]}}],
        "harness": harness,
        "max_turns": 10,
        "turn_timeout_s": 5.0,
        "worker_lost_timeout_s": 3.0,
        "turn_mode": TURN_MODE,
    }
    data.update(over)
    return parse_spec(data)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); it is dead for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


async def wait_until(pred, timeout: float = 20.0, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return True
        await asyncio.sleep(interval)
    return False


def turn_modes_fixture():  # type: ignore[no-untyped-def]
    """An autouse fixture running a module's tests in both turn modes."""
    import pytest

    @pytest.fixture(autouse=True, params=["drive", "activity"])
    def turn_mode(request, monkeypatch):  # type: ignore[no-untyped-def]
        import tests.support.helpers as helpers

        monkeypatch.setattr(helpers, "TURN_MODE", request.param)
        return request.param

    return turn_mode


async def drive_result_turns(client, handle) -> list:  # type: ignore[no-untyped-def]
    """The turns the completed drives' results carried (their last turns, after every
    Update of theirs), in history order: TurnResult objects."""
    from temporalio.api.enums.v1 import EventType

    from episodes.types.io import DriveResult

    scheduled: dict[int, str] = {}
    out: list = []
    async for ev in handle.fetch_history_events():
        if ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled[ev.event_id] = ev.activity_task_scheduled_event_attributes.activity_type.name
        elif ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            attrs = ev.activity_task_completed_event_attributes
            if scheduled.get(attrs.scheduled_event_id) == "drive":
                payloads = list(attrs.result.payloads)
                [drive] = await client.data_converter.decode(payloads, [DriveResult])
                out += drive.turns
    return out


def host_pid(session: Any) -> int:
    """A host pid that lives exactly as long as the session's harness can: the harness's
    own in a process-group box; in a sandbox (whose pids are its own namespace's) the
    box's bwrap, whose death ends every process in the box."""
    bwrap = getattr(session.runtime, "bwrap_pid", None)
    pid = bwrap if bwrap is not None else session.harness.pid
    assert pid, "the session has no live process"
    return int(pid)
