"""What a harness can make the tool bridge hold is bounded as the model proxy's (issue
28): the token is judged on the head, a session's connections are capped (a neighbour
still served), silent and slow connections are closed, bodies are bounded."""

from __future__ import annotations

import asyncio

import pytest

from episodes.harness.budget import StreamBudget
from episodes.tools.bridge import ToolBridge
from episodes.types.harness import HarnessLimits

pytestmark = pytest.mark.timeout(60)

MIB = 1024 * 1024


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _bridge(**limits: object) -> ToolBridge:
    return ToolBridge([add], budget=StreamBudget(HarnessLimits(**limits)))  # type: ignore[arg-type]


async def _status(reader: asyncio.StreamReader) -> int:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    return int(head.split(b" ", 2)[1])


def _post(bridge: ToolBridge, length: int, token: str | None = None) -> bytes:
    auth = b"Authorization: Bearer %s\r\n" % token.encode() if token else b""
    return b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n%sContent-Length: %d\r\n\r\n" % (
        bridge.port,
        auth,
        length,
    )


async def test_a_request_without_the_token_is_refused_on_its_head():
    async with _bridge() as bridge:
        reader, writer = await asyncio.open_connection("127.0.0.1", bridge.port)
        writer.write(_post(bridge, 60 * MIB))  # the body never comes
        assert await _status(reader) == 401
        writer.close()


async def test_past_its_connections_a_session_is_refused_and_its_neighbour_served():
    async with _bridge(connections=3) as mine, _bridge(connections=3) as neighbour:
        held = [await asyncio.open_connection("127.0.0.1", mine.port) for _ in range(3)]
        reader, writer = await asyncio.open_connection("127.0.0.1", mine.port)
        assert await _status(reader) == 503
        assert await asyncio.wait_for(reader.read(), 10) == b""
        writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", neighbour.port)
        writer.write(_post(neighbour, 2, neighbour.token) + b"{}")
        assert await _status(reader) not in (401, 503)  # served (MCP says what it thinks)
        writer.close()
        for _, w in held:
            w.close()


async def test_silent_and_slow_connections_are_closed():
    async with _bridge(idle_timeout_s=0.3, request_timeout_s=0.3) as bridge:
        reader, writer = await asyncio.open_connection("127.0.0.1", bridge.port)
        assert await asyncio.wait_for(reader.read(), 10) == b""  # never said anything
        writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", bridge.port)
        writer.write(b"POST /mcp HTTP/1.1\r\nHost: x\r\n")  # and the rest never comes
        assert await asyncio.wait_for(reader.read(), 10) == b""
        writer.close()


async def test_bodies_are_bounded_by_size_and_by_the_session_budget():
    async with _bridge(request_bytes=MIB, turn_request_bytes=2 * MIB) as bridge:
        token = bridge.token
        for length, status in ((2 * MIB, 413), (MIB, None), (MIB, None), (MIB, 429)):
            reader, writer = await asyncio.open_connection("127.0.0.1", bridge.port)
            writer.write(_post(bridge, length, token))
            if status is None:  # within the bounds: read (and charged), then answered
                writer.write(b" " * length)
                assert await _status(reader) not in (401, 413, 429)
            else:
                assert await _status(reader) == status
            writer.close()


async def test_only_accepted_requests_are_charged_to_the_session_budget():
    """Issue 40 §6: the bridge charged the turn's budget from a head's Content-Length,
    so a request abandoned before its body was whole used it up (the model proxy
    charges a body once it is read whole: the bridge now does the same)."""
    async with _bridge(
        request_bytes=MIB, turn_request_bytes=8 * MIB, request_timeout_s=0.3
    ) as bridge:
        budget = bridge._budget
        assert budget is not None
        # Its body never all comes: the connection is closed, nothing was taken in.
        reader, writer = await asyncio.open_connection("127.0.0.1", bridge.port)
        writer.write(_post(bridge, 700 * 1024, bridge.token) + b"{")
        await asyncio.wait_for(reader.read(), 10)  # closed (maybe after a 408)
        writer.close()
        # Larger than one request may be: refused on its head, never charged.
        reader, writer = await asyncio.open_connection("127.0.0.1", bridge.port)
        writer.write(_post(bridge, 2 * MIB, bridge.token))
        assert await _status(reader) == 413
        writer.close()
        assert budget.requested == 0, "nothing was accepted"
        # What is accepted is charged, once its body is whole.
        reader, writer = await asyncio.open_connection("127.0.0.1", bridge.port)
        writer.write(_post(bridge, 2, bridge.token) + b"{}")
        assert await _status(reader) not in (401, 413, 429)
        writer.close()
        assert budget.requested == 2
