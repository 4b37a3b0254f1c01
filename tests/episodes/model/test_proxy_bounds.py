"""What a harness can make the model proxy hold is bounded (issue 28): a request without
the token is refused on its head (its body never read), a session's connections are
capped (a neighbour session still served), idle and slow connections are closed, and
the request bytes a session sends are charged to its budget."""

from __future__ import annotations

import asyncio
import json

import pytest

from episodes.harness.budget import StreamBudget
from episodes.model.proxy import ModelProxy
from episodes.types.harness import HarnessLimits
from episodes.types.model import ModelSpec

pytestmark = pytest.mark.timeout(60)

MIB = 1024 * 1024


def _proxy(**limits: object) -> ModelProxy:
    # The upstream is never reached: every request here is refused, or a GET /v1/models.
    spec = ModelSpec(base_url="http://127.0.0.1:9/v1", model="m")
    budget = StreamBudget(HarnessLimits(**limits))  # type: ignore[arg-type]
    return ModelProxy(spec, upstream_key="k", budget=budget)


async def _open(proxy: ModelProxy) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", proxy.port)


async def _status(reader: asyncio.StreamReader) -> int:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    return int(head.split(b" ", 2)[1])


async def _models(proxy: ModelProxy) -> int:
    """A whole authorised request on a fresh connection: its status."""
    reader, writer = await _open(proxy)
    writer.write(
        b"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n"
        % proxy.token.encode()
    )
    status = await _status(reader)
    writer.close()
    return status


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
async def test_a_request_without_the_token_is_refused_before_its_body_is_read(framing):
    # Before: the proxy read the whole body (64 MiB; a chunked one held twice) first.
    async with _proxy() as proxy:
        reader, writer = await _open(proxy)
        size = b"Content-Length: %d" % (60 * MIB) if framing == "content-length" else b""
        te = b"Transfer-Encoding: chunked" if framing == "chunked" else b""
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n%s%s\r\n\r\n" % (size, te))
        # The answer comes on the head alone: not one byte of the body was sent.
        assert await _status(reader) == 401
        body = await asyncio.wait_for(reader.read(), 10)  # then the connection closes
        assert b"invalid or missing session token" in body
        assert proxy._server is not None and proxy._server.held == 0
        writer.close()


async def test_past_its_connections_a_session_is_refused_and_its_neighbour_served():
    async with _proxy(connections=4) as mine, _proxy(connections=4) as neighbour:
        held = [await _open(mine) for _ in range(4)]
        for _, writer in held:
            writer.write(b"GET /v1/models HTTP/1.1\r\n")  # started, then silent
        await asyncio.sleep(0)
        # A fifth is answered 429 and closed, its session's other connections untouched.
        reader, writer = await _open(mine)
        assert await _status(reader) == 429
        assert b"harness.limits.connections" in await asyncio.wait_for(reader.read(), 10)
        writer.close()
        assert await _models(neighbour) == 200
        # One of its own closes: the session is served again.
        held[0][1].close()
        for _ in range(100):
            assert mine._server is not None
            if mine._server.connections < 4:
                break
            await asyncio.sleep(0.05)
        assert await _models(mine) == 200
        for _, writer in held[1:]:
            writer.close()


async def test_an_idle_connection_is_closed_after_its_timeout():
    async with _proxy(idle_timeout_s=0.3) as proxy:
        reader, writer = await _open(proxy)
        # Nothing said: closed without an answer (before: held open for good).
        assert await asyncio.wait_for(reader.read(), 10) == b""
        # Also after a request is served (keep-alive).
        reader, writer = await _open(proxy)
        writer.write(
            b"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n"
            % proxy.token.encode()
        )
        assert await _status(reader) == 200
        rest = await asyncio.wait_for(reader.read(), 10)
        assert rest.startswith(b'{"object": "list"')  # the answer's body, then the end
        writer.close()


async def test_a_request_that_arrives_too_slowly_is_answered_408_and_closed():
    async with _proxy(request_timeout_s=0.3) as proxy:
        reader, writer = await _open(proxy)
        auth = b"Authorization: Bearer %s\r\n" % proxy.token.encode()
        writer.write(
            b"POST /v1/chat/completions HTTP/1.1\r\n" + auth + b"Content-Length: 10\r\n\r\n"
        )
        writer.write(b"{")  # and the rest never comes
        assert await _status(reader) == 408
        writer.close()


async def test_request_bytes_are_charged_to_the_session_budget():
    async with _proxy(turn_request_bytes=MIB) as proxy:
        auth = b"Authorization: Bearer %s\r\n" % proxy.token.encode()
        head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n%sContent-Length: %d\r\n\r\n"
        half = b"[" + b" " * (MIB // 2) + b"]"  # not an object: answered 400, still charged
        reader, writer = await _open(proxy)
        writer.write(head % (auth, len(half)) + half)
        assert await _status(reader) == 400
        writer.close()
        # The next one would pass the turn's budget: refused on its head.
        reader, writer = await _open(proxy)
        writer.write(head % (auth, len(half)))
        assert await _status(reader) == 429
        assert b"harness.limits.turn_request_bytes" in await asyncio.wait_for(reader.read(), 10)
        writer.close()
        # One larger than the whole budget: 413.
        reader, writer = await _open(proxy)
        writer.write(head % (auth, 2 * MIB))
        assert await _status(reader) == 413
        writer.close()
        assert proxy._budget is not None and proxy._budget.requested == len(half)


async def test_the_bytes_held_at_once_are_bounded_across_connections():
    async with _proxy(request_bytes=MIB) as proxy:
        auth = b"Authorization: Bearer %s\r\n" % proxy.token.encode()
        head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n%sContent-Length: %d\r\n\r\n"
        first = await _open(proxy)
        first[1].write(head % (auth, 700 * 1024))  # its body is on its way
        await asyncio.sleep(0.1)
        reader, writer = await _open(proxy)
        writer.write(head % (auth, 700 * 1024))
        assert await _status(reader) == 429
        body = json.loads(await asyncio.wait_for(reader.read(), 10))
        assert "hold too many request bytes" in body["error"]["message"]
        writer.close()
        first[1].close()


async def test_only_accepted_requests_are_charged_to_the_session_budget():
    """Issue 40: the turn's budget was charged from a head's Content-Length before the
    413 / 429 checks, so a refused or abandoned request used it up."""
    async with _proxy(
        request_bytes=MIB, turn_request_bytes=8 * MIB, request_timeout_s=0.3
    ) as proxy:
        budget = proxy._budget
        assert budget is not None
        auth = b"Authorization: Bearer %s\r\n" % proxy.token.encode()
        head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n%sContent-Length: %d\r\n\r\n"
        # Larger than one request may be (request_bytes), well within the turn's: 413.
        reader, writer = await _open(proxy)
        writer.write(head % (auth, 2 * MIB))
        assert await _status(reader) == 413
        writer.close()
        # Past the bytes the session's connections may hold at once: 429.
        first = await _open(proxy)
        first[1].write(head % (auth, 700 * 1024) + b"{")  # its body never all comes
        await asyncio.sleep(0.1)
        reader, writer = await _open(proxy)
        writer.write(head % (auth, 700 * 1024))
        assert await _status(reader) == 429
        writer.close()
        # The first is abandoned: answered 408 and closed, its body never whole.
        assert await _status(first[0]) == 408
        first[1].close()
        assert budget.requested == 0, "nothing was accepted"
        # What is accepted is charged (a body that is not an object: answered 400).
        body = b"[" + b" " * 1000 + b"]"
        reader, writer = await _open(proxy)
        writer.write(head % (auth, len(body)) + body)
        assert await _status(reader) == 400
        writer.close()
        assert budget.requested == len(body)
