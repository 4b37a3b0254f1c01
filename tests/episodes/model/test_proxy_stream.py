"""A streamed answer forwarded from the upstream's socket to the harness's (issue 22):
a harness that hangs up mid-stream, one that reads slowly, an upstream that stalls or
breaks, and the aiohttp path behind an environment proxy. Each call recorded once."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket

import httpx
import pytest

from episodes.model import sender
from episodes.model.proxy import ModelProxy
from episodes.model.upstream import Response
from episodes.types.model import ModelSpec

pytestmark = pytest.mark.timeout(60)


def _event(content: str | None = None, *, usage: bool = False) -> bytes:
    if usage:
        body: dict = {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2}}
    else:
        body = {"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}]}
    event = b"data: %s\n\n" % json.dumps(body).encode()
    return b"%x\r\n%s\r\n" % (len(event), event)


class RawUpstream:
    """Answers every request with a chunked SSE stream that does what `mode` says:
    `pieces` (the contents, then usage and [DONE]), `endless`, `flood` (endless, big
    pieces, no pause), `stall` or `cut` (two
    pieces, then nothing more / the connection closes)."""

    def __init__(self, mode: str, pieces: list[str] | None = None) -> None:
        self.mode = mode
        self.pieces = pieces or ["a", "b"]
        self.requests = 0
        self.dropped = asyncio.Event()  # a connection the proxy closed mid-answer

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1"

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                self.requests += 1
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                    b"Transfer-Encoding: chunked\r\n\r\n"
                )
                while self.mode == "flood":  # as fast as the proxy reads it
                    writer.write(_event("z" * 65_000))
                    await writer.drain()
                if self.mode == "endless":
                    while True:
                        writer.write(_event("x"))
                        await writer.drain()
                        await asyncio.sleep(0.001)
                for piece in self.pieces[:2] if self.mode in ("stall", "cut") else self.pieces:
                    writer.write(_event(piece))
                    await writer.drain()
                if self.mode == "stall":
                    await asyncio.Event().wait()
                if self.mode == "cut":
                    break
                writer.write(_event(usage=True) + b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            self.dropped.set()
        writer.close()


def _proxy(base_url: str, calls: list, **spec: object) -> ModelProxy:
    recorded = asyncio.Event()

    def on_call(record: dict) -> None:
        calls.append(record)
        recorded.set()

    proxy = ModelProxy(ModelSpec(base_url=base_url, model="m", **spec), on_call=on_call)
    proxy.recorded = recorded  # type: ignore[attr-defined]
    return proxy


def _streamed_call(
    http: httpx.AsyncClient, proxy: ModelProxy
) -> contextlib.AbstractAsyncContextManager[httpx.Response]:
    """A streamed chat call through the proxy (an `async with` of its response)."""
    return http.stream(
        "POST",
        f"{proxy.base_url}/chat/completions",
        json={"messages": [{"role": "user", "content": "hi"}], "stream": True},
        headers={"Authorization": f"Bearer {proxy.token}"},
    )


async def _stream_text(http: httpx.AsyncClient, proxy: ModelProxy) -> str:
    """A whole streamed call through the proxy: the content it carried."""
    text = ""
    async with _streamed_call(http, proxy) as r:
        async for line in r.aiter_lines():
            if line.startswith("data: {"):
                event = json.loads(line[6:])
                if "error" in event:
                    text += event["error"]["message"]
                choices = event.get("choices") or [{}]
                text += (choices[0].get("delta") or {}).get("content") or ""
    return text


def _content(record: dict) -> str:
    return record["response"]["choices"][0]["message"]["content"]


async def test_a_harness_that_hangs_up_mid_stream_is_recorded_once_and_the_upstream_dropped():
    upstream = RawUpstream("endless")
    calls: list = []
    async with upstream as base_url:
        async with _proxy(base_url, calls) as proxy, httpx.AsyncClient() as http:
            async with _streamed_call(http, proxy) as r:
                async for _ in r.aiter_bytes():
                    break  # hang up after the first piece
            await proxy.recorded.wait()  # type: ignore[attr-defined]
            await upstream.dropped.wait()  # the unfinished answer's connection is not reused
            # The proxy serves on: the next call is whole and recorded.
            upstream.mode = "pieces"
            assert await _stream_text(http, proxy) == "ab"
    first, second = calls
    assert first["stream"] and first["error"] == "harness disconnected"
    assert _content(first).startswith("x")
    assert "error" not in second and _content(second) == "ab"
    assert proxy.failure is None and upstream.requests == 2


async def test_a_slow_reader_gets_the_whole_stream_while_the_upstream_waits(monkeypatch):
    paused = asyncio.Event()
    pause = Response.pause

    def noting_pause(self: Response) -> None:
        paused.set()
        pause(self)

    monkeypatch.setattr(Response, "pause", noting_pause)
    pieces = [f"{i:04d}" + "y" * 65_531 for i in range(256)]  # 16 MiB: past every buffer
    calls: list = []
    async with RawUpstream("pieces", pieces) as base_url, _proxy(base_url, calls) as proxy:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", proxy.port))
        reader, writer = await asyncio.open_connection(sock=sock)
        body = json.dumps({"messages": [], "stream": True}).encode()
        writer.write(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (proxy.token.encode(), len(body), body)
        )
        await paused.wait()  # the harness reads nothing yet: the proxy stops reading
        assert calls == []
        await reader.readuntil(b"\r\n\r\n")
        data = b""
        while not data.endswith(b"0\r\n\r\n"):
            size = int((await reader.readuntil(b"\r\n"))[:-2], 16)
            data += (await reader.readexactly(size + 2))[:-2] if size else b"0\r\n\r\n"
        writer.close()
        await proxy.recorded.wait()  # type: ignore[attr-defined]
    events = [e for e in data[:-5].split(b"\n\n") if e.startswith(b"data: {")]
    text = "".join(
        (json.loads(e[6:])["choices"] or [{"delta": {}}])[0]["delta"].get("content") or ""
        for e in events
    )
    assert text == "".join(pieces)
    (record,) = calls
    assert _content(record) == "".join(pieces) and "error" not in record


async def test_a_harness_that_stops_reading_holds_the_upstream_no_longer_than_the_timeout():
    # Before: the timeout stopped counting while the proxy waited on the harness, so a
    # harness that never read held an upstream connection (and a replica's slot) for good.
    calls: list = []
    async with RawUpstream("flood") as base_url:
        async with _proxy(base_url, calls, timeout_s=0.5) as proxy:
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.setblocking(False)
            await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", proxy.port))
            _reader, writer = await asyncio.open_connection(sock=sock)
            body = json.dumps({"messages": [], "stream": True}).encode()
            writer.write(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (proxy.token.encode(), len(body), body)
            )
            # Never read: the call ends, the upstream's connection is dropped.
            await asyncio.wait_for(proxy.recorded.wait(), 20)  # type: ignore[attr-defined]
            writer.close()
    (record,) = calls
    assert record["error"].startswith("harness read the stream too slowly")
    assert proxy.failure is None  # the harness's doing, not the model's


@pytest.mark.parametrize(
    ("mode", "why"),
    [("stall", "upstream ReadTimeout"), ("cut", "upstream RemoteProtocolError")],
)
async def test_an_upstream_that_stalls_or_breaks_mid_stream_is_a_named_model_error(mode, why):
    calls: list = []
    async with RawUpstream(mode) as base_url:
        async with _proxy(base_url, calls, timeout_s=0.5) as proxy, httpx.AsyncClient() as http:
            text = await _stream_text(http, proxy)
    assert text.startswith("ab") and f"model stream broke: {why}" in text
    (record,) = calls
    assert record["error"] == f"model stream broke: {why}" and _content(record) == "ab"
    assert proxy.failure is not None and str(proxy.failure) == record["error"]


async def test_behind_an_environment_proxy_streams_go_through_aiohttp(monkeypatch):
    monkeypatch.setattr(sender, "_env_proxy", lambda url: {"proxy": None})
    calls: list = []
    async with RawUpstream("pieces", ["one ", "two"]) as base_url:
        async with _proxy(base_url, calls) as proxy, httpx.AsyncClient() as http:
            assert [type(c).__name__ for c in proxy._sender._clients.values()] == [
                "AiohttpUpstream"
            ]
            assert await _stream_text(http, proxy) == "one two"
    (record,) = calls
    assert _content(record) == "one two" and "error" not in record


async def test_the_environment_proxy_is_looked_up_once_per_upstream_not_per_session(monkeypatch):
    """Each session's start looked up the environment's proxy for each of its upstreams
    (a thread hop, and netrc read when a proxy is set): now once per upstream URL while
    the proxy variables stay as they are; set one and the next session goes through it."""
    import secrets

    import aiohttp.helpers

    from episodes.model.upstream_aiohttp import AiohttpUpstream

    looked: list[str] = []
    real = aiohttp.helpers.get_env_proxy_for_url

    def spy(url):  # type: ignore[no-untyped-def]
        looked.append(str(url))
        return real(url)

    monkeypatch.setattr(aiohttp.helpers, "get_env_proxy_for_url", spy)
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    spec = ModelSpec(base_url=f"http://127.0.0.1:9/{secrets.token_hex(4)}/v1", model="m")
    senders = [sender.Sender(spec, None, f"s-{i}", 0.01, 0.1) for i in range(4)]
    try:
        for s in senders[:3]:
            await s.start()
        assert len(looked) == 1
        assert not any(isinstance(c, AiohttpUpstream) for c in senders[0]._clients.values())
        monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
        await senders[3].start()
        assert len(looked) == 2
        assert [type(c) for c in senders[3]._clients.values()] == [AiohttpUpstream]
    finally:
        for s in senders:
            await s.close()
