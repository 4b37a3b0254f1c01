"""Rising latency slows a worker's calls down (episodes/model/limiter.py through
fleet.py and sender.py), against a real HTTP server on loopback that answers `FAST_AT`
calls at once quickly and every call past them slowly."""

from __future__ import annotations

import asyncio
import json

import openai
import pytest
from aiohttp import web

from episodes.model.proxy import ModelProxy
from episodes.net import tcp_listener
from episodes.types.model import ModelSpec, UpstreamSpec

pytestmark = pytest.mark.timeout(120)

FAST_AT = 4  # calls the server answers at once without queueing
FAST_S = 0.01
SLOW_S = 0.6  # far apart, whatever the machine's load
CEILING = 12
SESSIONS = 16  # more than the ceiling: every place is used
HELLO = [{"role": "user", "content": "hello there"}]


class Loaded:
    """A chat server whose answers' heads come late once more than FAST_AT are in."""

    def __init__(self) -> None:
        self.in_flight = self.most = self.slow = 0

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            queued = self.in_flight > FAST_AT
            self.slow += queued
            await asyncio.sleep(SLOW_S if queued else FAST_S)
            if not body.get("stream"):
                return web.json_response(
                    {
                        "id": "c",
                        "object": "chat.completion",
                        "created": 0,
                        "model": "m",
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": "ok"},
                                "finish_reason": "stop",
                            }
                        ],
                    }
                )
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)  # the head: what the limiter times
        finally:
            self.in_flight -= 1
        chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}
        delta = {**chunk, "choices": [{"index": 0, "delta": {"content": "ok"}}]}
        await resp.write(f"data: {json.dumps(delta)}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


def client_of(proxy: ModelProxy) -> openai.AsyncOpenAI:
    env = proxy.env()
    return openai.AsyncOpenAI(
        base_url=env["OPENAI_BASE_URL"], api_key=env["OPENAI_API_KEY"], max_retries=0
    )


async def ask(c: openai.AsyncOpenAI, stream: bool) -> str:
    if not stream:
        answer = await c.chat.completions.create(model="x", messages=HELLO)
        return answer.choices[0].message.content or ""
    text = ""
    async for chunk in await c.chat.completions.create(model="x", messages=HELLO, stream=True):
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
    return text


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
async def test_rising_latency_lowers_the_limit_and_every_call_still_succeeds(stream):
    server = Loaded()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", server.chat)
    runner = web.AppRunner(app)
    await runner.setup()
    sock = tcp_listener()
    await web.SockSite(runner, sock).start()
    base_url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    spec = ModelSpec(
        upstreams=[UpstreamSpec(base_url=base_url, max_concurrency=CEILING)], model="m"
    )
    calls: list = []
    failures: list = []
    proxies = [
        ModelProxy(
            spec,
            on_call=calls.append,
            on_failure=failures.append,
            session_id=f"s-{i}",
            backoff_s=0.01,
        )
        for i in range(SESSIONS)
    ]
    try:
        for p in proxies:
            await p.__aenter__()
        clients = [client_of(p) for p in proxies]  # made once: each loads the CA bundle
        replica = proxies[0]._sender.route.replicas[0]  # type: ignore[union-attr]
        for _ in range(12):  # one call at a time: the server's unloaded latency
            assert await ask(clients[0], stream) == "ok"
        assert replica.limit == CEILING and server.slow == 0

        async def session(c: openai.AsyncOpenAI) -> list[str]:
            return [await ask(c, stream) for _ in range(3)]

        answers = await asyncio.gather(*(session(c) for c in clients))
        assert answers == [["ok"] * 3] * SESSIONS
        # More calls at once than the server answers quickly: latency rose, the limit
        # came down from its ceiling (it never leaves [1, ceiling]).
        assert server.slow > 0
        assert replica.adaptive.latency_cuts > 0
        assert 1.0 <= replica.limit < CEILING
        assert replica.adaptive.throttle_cuts == 0
        assert server.most <= CEILING
    finally:
        for p in proxies:
            await p.__aexit__(None, None, None)
        await runner.cleanup()
    assert failures == []
    assert len(calls) == 12 + 3 * SESSIONS
    assert all(c["status"] == 200 and c["attempts"] == 1 for c in calls)


async def test_quick_4xx_answers_do_not_pull_the_latency_baseline_down():
    """A 400 is the harness's mistake, answered at once: not a latency sample (a flood of
    them once dragged the baseline to ~0, and the next real call looked like queueing)."""
    real_s = 0.2  # every 2xx answer's head comes at least this late

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        if body["messages"][0]["content"] == "bad":
            return web.json_response({"error": {"message": "bad request"}}, status=400)
        await asyncio.sleep(real_s)
        message = {"role": "assistant", "content": "ok"}
        return web.json_response(
            {"id": "c", "object": "chat.completion", "created": 0, "model": "m",
             "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
        )  # fmt: skip

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app)
    await runner.setup()
    sock = tcp_listener()
    await web.SockSite(runner, sock).start()
    base_url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    spec = ModelSpec(upstreams=[UpstreamSpec(base_url=base_url, max_concurrency=2)], model="m")
    calls: list = []
    try:
        async with ModelProxy(spec, on_call=calls.append, backoff_s=0.01) as proxy:
            c = client_of(proxy)
            adaptive = proxy._sender.route.replicas[0].adaptive  # type: ignore[union-attr]
            for _ in range(12):  # the baseline: real calls, one at a time
                assert await ask(c, stream=False) == "ok"
            for _ in range(60):  # the harness's mistakes, answered at once
                with pytest.raises(openai.BadRequestError):
                    await c.chat.completions.create(
                        model="x", messages=[{"role": "user", "content": "bad"}]
                    )
            for _ in range(3):
                assert await ask(c, stream=False) == "ok"
            assert adaptive.latency_cuts == 0
            assert adaptive.long_rtt.value >= real_s  # each sample took that long at least
            assert adaptive.long_rtt.count == 15  # the 2xx answers only
    finally:
        await runner.cleanup()
    assert [c["status"] for c in calls] == [200] * 12 + [400] * 60 + [200] * 3
