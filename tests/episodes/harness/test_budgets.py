"""What a harness may stream (issue 19): past a per-turn or between-turns budget the turn
ends `protocol_error` naming the spec field, the harness is stopped, and what the worker
kept stays within the budget. Real harness processes; nothing mocked."""

from __future__ import annotations

import json
import sys

from episodes.harness import NativeDriver
from episodes.harness.budget import StreamBudget
from episodes.types.harness import HarnessLimits
from tests.support import HARNESSES
from tests.support.procs import PeakRss, assert_group_gone, scripted

FAST = {"ready_timeout_s": 5.0, "stop_timeout_s": 1.0}
MIB = 1024 * 1024
AGENT = str(HARNESSES / "acp_agent.py")


def _kept_bytes(events: list) -> int:
    return sum(len(json.dumps(e)) for e in events)


async def test_a_turn_streaming_past_the_default_byte_budget_is_a_protocol_error(runtime):
    """400 events of 1 MiB in one turn were all accepted (worker RSS: 933 MB)."""
    s = NativeDriver(runtime, scripted("flood", "n=400", "kb=1024"), **FAST)
    await s.start()
    with PeakRss() as rss:
        record = await s.turn(1, "x", timeout_s=120)
    assert record.error_type == "protocol_error", record.error
    assert "harness.limits.turn_bytes" in record.error
    assert _kept_bytes(record.events) <= 64 * MIB  # the default budget, structurally
    assert rss.growth_mib < 400, f"memory grew by {rss.growth_mib:.0f} MiB"
    assert not s.alive
    assert_group_gone(s.pid)


async def test_a_turn_streaming_past_its_event_budget_is_a_protocol_error(runtime):
    budget = StreamBudget(HarnessLimits(turn_events=50))
    s = NativeDriver(runtime, scripted("flood", "n=1000", "kb=0"), budget=budget, **FAST)
    await s.start()
    record = await s.turn(1, "x", timeout_s=60)
    assert record.error_type == "protocol_error", record.error
    assert "more than 50 events in one turn (harness.limits.turn_events" in record.error
    assert len(record.events) <= 50
    assert_group_gone(s.pid)


async def test_the_budget_is_per_turn(runtime):
    budget = StreamBudget(HarnessLimits(turn_events=50))
    s = NativeDriver(runtime, scripted("flood", "n=40", "kb=0"), budget=budget, **FAST)
    await s.start()
    for n in (1, 2, 3):  # 120 events in all, 40 a turn
        record = await s.turn(n, n, timeout_s=60)
        assert record.error is None and len(record.events) == 40
    await s.stop()


# -- ACP: every message the agent sends counts, in a turn and between turns ------------


def _agent(runtime, budget: StreamBudget):
    from episodes.harness.acp import AcpDriver

    return AcpDriver(
        runtime,
        [sys.executable, AGENT, "ok"],
        budget=budget,
        ready_timeout_s=15.0,
        stop_timeout_s=1.0,
        cancel_grace_s=1.0,
    )


async def test_an_acp_turn_streaming_past_its_byte_budget_is_a_protocol_error(runtime):
    s = _agent(runtime, StreamBudget(HarnessLimits(turn_bytes=4 * MIB)))
    await s.start()
    try:
        record = await s.turn(1, "flood 400 64", timeout_s=60)  # 25 MiB of updates
        assert record.error_type == "protocol_error", record.error
        assert "harness.limits.turn_bytes" in record.error
        assert _kept_bytes(record.events) <= 4 * MIB
        assert not s.alive
    finally:
        await s.stop()


async def test_an_acp_agent_streaming_between_turns_fails_the_next_turn(runtime):
    s = _agent(runtime, StreamBudget(HarnessLimits(between_turns_bytes=2 * MIB)))
    await s.start()
    try:
        first = await s.turn(1, "flood-later 400 64", timeout_s=60)
        assert first.error is None, first.error
        # The transport stops reading once past the budget: what waits is bounded.
        assert await _eventually(lambda: s._transport.fault is not None)
        assert s._client.updates.qsize() * 64 * 1024 <= 2 * MIB
        second = await s.turn(2, "hello", timeout_s=30)
        assert second.error_type == "protocol_error", second.error
        assert "between turns (harness.limits.between_turns_bytes" in second.error
        assert not s.alive
    finally:
        await s.stop()


async def _eventually(predicate, timeout_s: float = 30.0) -> bool:
    import asyncio
    import time

    deadline = time.monotonic() + timeout_s
    while not predicate() and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    return predicate()


# -- the session: tool calls between turns count too ------------------------------------


async def test_tool_calls_between_turns_past_their_budget_end_the_next_turn():
    from episodes.session.live import LiveSession
    from episodes.types.spec import parse_spec
    from tests.support.mcp_client import mcp_client

    spec = parse_spec(
        {
            "name": "kv-budget",
            "env": "kv-store",
            "tasks": [{"id": "t", "data": {"goal": {"a": "1"}}}],
            "harness": {
                "command": scripted("echo"),
                "limits": {"between_turns_events": 5},
                **FAST,
            },
        }
    )
    session = LiveSession(spec, spec.tasks[0], 0, "s-budget")
    try:
        await session.open()
        bridge = session.services.bridge  # on the worker's loopback, whatever the box
        async with mcp_client(bridge.url, bridge.token) as client:
            for i in range(20):  # the harness's tools, called while no turn runs
                await client.call_tool("put", {"key": f"k{i}", "value": "v"})
        assert len(session.services._between) <= 5  # not kept past the budget
        assert await _eventually(lambda: not session.harness.alive)  # stopped at once
        result = await session.turn(0)
    finally:
        await session.close()
    assert result.termination == "protocol_error", result.record.error
    assert "harness.limits.between_turns_events" in result.record.error
