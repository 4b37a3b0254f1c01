"""The proxy's HTTP/1.1 upstream client against real sockets speaking each body framing."""

from __future__ import annotations

import asyncio
import gzip
import ssl

import pytest

from episodes.model.upstream import Upstream, UpstreamError

pytestmark = pytest.mark.timeout(30)


async def _serve(answers: list[bytes], *, close_after: int | None = None):
    """A raw server answering each request on a connection with the next of `answers`;
    closes the connection after `close_after` answers (a server's idle keep-alive end)."""
    seen: list[bytes] = []
    conns = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal conns
        conns += 1
        served = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                seen.append(head + await reader.readexactly(length))
                writer.write(answers.pop(0))
                await writer.drain()
                served += 1
                if close_after is not None and served >= close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}/v1/chat/completions", seen, lambda: conns


def _chunked(*parts: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


async def test_content_length_chunked_gzip_and_keep_alive():
    zipped = gzip.compress(b'{"z": 1}')
    answers = [
        b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\n" + b'{"a": 1}',
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        + _chunked(b"data: 1\n\n", b"data: 2\n\n"),
        b"HTTP/1.1 429 Too Many\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n"
        % len(zipped)
        + zipped,
    ]
    server, url, seen, conns = await _serve(answers)
    client = Upstream(ssl.create_default_context())
    try:
        resp = await client.post(url, b'{"q": 1}', {"X-Session-ID": "s1"}, 5)
        assert (resp.status, await resp.read(5)) == (200, b'{"a": 1}')
        resp.close()
        resp = await client.post(url, b"{}", {}, 5)
        assert [p async for p in resp.iter_any(5)] in (
            [b"data: 1\n\ndata: 2\n\n"],
            [b"data: 1\n\n", b"data: 2\n\n"],
        )
        resp.close()
        resp = await client.post(url, b"{}", {}, 5)
        assert (resp.status, await resp.read(5)) == (429, b'{"z": 1}')
        resp.close()
    finally:
        await client.close()
        server.close()
    assert conns() == 1  # one kept-alive connection for the three calls
    assert b"X-Session-ID: s1\r\n" in seen[0] and seen[0].endswith(b'{"q": 1}')
    assert b"POST /v1/chat/completions HTTP/1.1\r\n" in seen[0]


async def test_a_pooled_connection_the_server_closed_is_replaced_once():
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
    server, url, seen, conns = await _serve([ok, ok], close_after=1)
    client = Upstream(ssl.create_default_context())
    try:
        for _ in range(2):
            resp = await client.post(url, b"{}", {}, 5)
            assert await resp.read(5) == b"{}"
            resp.close()
            await asyncio.sleep(0.05)  # the server's close reaches us, or not yet
    finally:
        await client.close()
        server.close()
    assert len(seen) == 2 and conns() == 2


async def test_a_body_cut_short_is_an_error_and_a_closed_port_a_connect_error():
    server, url, _, _ = await _serve(
        [b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{}"], close_after=1
    )
    client = Upstream(ssl.create_default_context())
    try:
        resp = await client.post(url, b"{}", {}, 5)
        with pytest.raises(UpstreamError):
            await resp.read(5)
        resp.close()
        server.close()
        await server.wait_closed()
        with pytest.raises(UpstreamError) as err:
            await client.post(url, b"{}", {}, 5)
        assert err.value.kind == "ConnectError"
    finally:
        await client.close()


async def test_no_answer_within_the_timeout_is_a_timeout():
    async def silent(reader, writer):
        await asyncio.sleep(10)

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/x"
    client = Upstream(ssl.create_default_context())
    try:
        with pytest.raises(TimeoutError):
            await client.post(url, b"{}", {}, 0.2)
    finally:
        await client.close()
        server.close()
