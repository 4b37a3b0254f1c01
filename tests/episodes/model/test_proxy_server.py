"""The model proxy's own HTTP/1.1 server (episodes/model/serve.py) under raw sockets:
keep-alive and pipelining, chunked bodies, 100-continue, limits, malformed requests."""

from __future__ import annotations

import asyncio
import json

import pytest

from episodes.model.serve import HttpServer, Request
from episodes.net import tcp_listener

pytestmark = pytest.mark.timeout(30)


async def _echo(request: Request) -> None:
    if request.path == "/stream":
        request.start_stream()
        for piece in (b"data: 1\n\n", b"data: 2\n\n"):
            request.send(piece)
        request.end()
        return
    body = json.dumps({"path": request.path, "method": request.method, "n": len(request.body)})
    request.respond(200, body.encode())


@pytest.fixture
async def server():
    srv = HttpServer(_echo, max_body=1000)
    sock = tcp_listener()
    port = sock.getsockname()[1]
    await srv.listen_tcp(sock)
    yield port
    await srv.close(timeout=1.0)


async def _answers(reader: asyncio.StreamReader, n: int) -> list[tuple[int, bytes]]:
    """n answers (status, body) read off a connection (Content-Length or chunked)."""
    out = []
    for _ in range(n):
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        status = int(head.split(" ", 2)[1])
        lower = head.lower()
        if "transfer-encoding: chunked" in lower:
            body = b""
            while True:
                size = int((await reader.readuntil(b"\r\n"))[:-2], 16)
                data = await reader.readexactly(size + 2)
                if size == 0:
                    break
                body += data[:-2]
        else:
            length = int(lower.split("content-length: ")[1].split("\r\n")[0])
            body = await reader.readexactly(length)
        out.append((status, body))
    return out


async def test_pipelined_requests_on_one_connection_are_answered_in_order(server):
    reader, writer = await asyncio.open_connection("127.0.0.1", server)
    writer.write(
        b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
        b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n"
        b"POST /b?q=1 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"2\r\nhi\r\n3;ext=1\r\nyou\r\n0\r\n\r\n"
    )
    (s1, b1), (s2, b2), (s3, b3) = await _answers(reader, 3)
    assert (s1, json.loads(b1)) == (200, {"path": "/a", "method": "POST", "n": 3})
    assert (s2, b2) == (200, b"data: 1\n\ndata: 2\n\n")
    assert (s3, json.loads(b3)) == (200, {"path": "/b", "method": "POST", "n": 5})
    writer.close()


async def test_requests_arriving_a_byte_at_a_time_are_parsed_once_each(server, monkeypatch):
    # An untrusted harness may send a request in as many pieces as it likes: the parser
    # (llhttp) goes on from where it stopped, each head is judged once (not once per read).
    from episodes.model import serve

    heads = []
    complete = serve._Conn.on_headers_complete

    def counted(conn: serve._Conn) -> None:
        heads.append(conn._url)
        complete(conn)

    monkeypatch.setattr(serve._Conn, "on_headers_complete", counted)
    reader, writer = await asyncio.open_connection("127.0.0.1", server)
    wire = (
        b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
        b"POST /b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"2\r\nhi\r\n3;ext=1\r\nyou\r\n0\r\n\r\n"
        b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n"
    )
    for i in range(len(wire)):
        writer.write(wire[i : i + 1])
        await writer.drain()
        await asyncio.sleep(0)
    (s1, b1), (s2, b2), (s3, b3) = await _answers(reader, 3)
    assert (s1, json.loads(b1)["n"]) == (200, 3)
    assert (s2, json.loads(b2)) == (200, {"path": "/b", "method": "POST", "n": 5})
    assert (s3, b3) == (200, b"data: 1\n\ndata: 2\n\n")
    assert len(heads) == 3, heads
    writer.close()


async def test_expect_100_continue_then_connection_close(server):
    reader, writer = await asyncio.open_connection("127.0.0.1", server)
    writer.write(
        b"POST /c HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
        b"Connection: close\r\nContent-Length: 4\r\n\r\n"
    )
    assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
    writer.write(b"wxyz")
    ((status, body),) = await _answers(reader, 1)
    assert status == 200 and json.loads(body)["n"] == 4
    assert await reader.read() == b""  # closed after the answer
    writer.close()


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"NONSENSE\r\n\r\n", 400),
        (b"GET /x HTTP/2.0\r\n\r\n", 400),
        (b"POST /x HTTP/1.1\r\nContent-Length: nope\r\n\r\n", 400),
        (b"POST /x HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400),
        (b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
        (b"POST /x HTTP/1.1\r\nContent-Length: 1001\r\n\r\n", 413),
        (b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3e9\r\n" + b"x" * 1001, 413),
        (b"GET /x HTTP/1.1\r\nX-Long: " + b"a" * 70_000, 431),
        # Each crashed the connection handler or passed the hand-written parser (issue 28).
        (b"POST /x HTTP/1.1\r\nContent-Length: \xb2\r\n\r\n", 400),  # latin-1 superscript 2
        (b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0x2\r\nhi\r\n0\r\n\r\n", 400),
        (b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n-0\r\n\r\n", 400),
        (b"POST /x HTTP/1.1\r\nContent-Length: +3\r\n\r\nabc", 400),
    ],
)
async def test_a_request_it_will_not_serve_is_refused_and_the_connection_closed(
    server, request_bytes, status
):
    reader, writer = await asyncio.open_connection("127.0.0.1", server)
    writer.write(request_bytes)
    ((got, body),) = await _answers(reader, 1)
    assert got == status and "error" in json.loads(body)
    assert await reader.read() == b""
    writer.close()


async def test_stop_cancels_a_request_in_flight_after_its_grace():
    started = asyncio.Event()

    async def stuck(request: Request) -> None:
        started.set()
        await asyncio.Event().wait()

    srv = HttpServer(stuck, max_body=10)
    sock = tcp_listener()
    await srv.listen_tcp(sock)
    reader, writer = await asyncio.open_connection(*sock.getsockname()[:2])
    writer.write(b"GET / HTTP/1.1\r\n\r\n")
    await started.wait()
    await srv.close(timeout=0.05)
    assert await reader.read() == b""  # the connection is closed, no answer
    writer.close()


async def test_expect_100_continue_with_a_chunked_body(server):
    reader, writer = await asyncio.open_connection("127.0.0.1", server)
    writer.write(
        b"POST /c HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
    writer.write(b"3\r\nabc\r\n0\r\n\r\n")
    ((status, body),) = await _answers(reader, 1)
    assert status == 200 and json.loads(body)["n"] == 3
    writer.close()
