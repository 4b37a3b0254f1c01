"""Sessions' proxies over a fleet of real upstreams on loopback (episodes/model/fleet.py):
sticky least-loaded routing, moves when an upstream dies, 429 as backpressure."""

from __future__ import annotations

import asyncio
import json

import openai
import pytest
from aiohttp import web
from pydantic import ValidationError

from episodes.model.fleet import Replica
from episodes.model.proxy import ModelProxy
from episodes.model.scripted.server import ScriptedUpstream
from episodes.net import tcp_listener
from episodes.types.model import ModelSpec, UpstreamSpec

pytestmark = pytest.mark.timeout(60)

HELLO = [{"role": "user", "content": "hello there"}]


def fleet_spec(*ups: ScriptedUpstream, **fields) -> ModelSpec:
    return ModelSpec(upstreams=[{"base_url": u.base_url} for u in ups], model="m", **fields)


def proxy_for(spec: ModelSpec, session: str, calls: list, failures: list) -> ModelProxy:
    return ModelProxy(
        spec,
        on_call=calls.append,
        on_failure=failures.append,
        session_id=session,
        backoff_s=0.01,
    )


async def ask(proxy: ModelProxy, stream: bool = False) -> str:
    env = proxy.env()
    c = openai.AsyncOpenAI(
        base_url=env["OPENAI_BASE_URL"], api_key=env["OPENAI_API_KEY"], max_retries=0
    )
    if not stream:
        answer = await c.chat.completions.create(model="x", messages=HELLO)
        return answer.choices[0].message.content or ""
    text = ""
    async for chunk in await c.chat.completions.create(model="x", messages=HELLO, stream=True):
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
    return text


def sessions_of(up: ScriptedUpstream) -> list[str]:
    return [r["headers"].get("X-Session-ID") for r in up.chat_requests]


def test_one_shape_base_url_or_upstreams():
    one = ModelSpec(base_url="http://a/v1", model="m")
    assert [u.base_url for u in one.targets()] == ["http://a/v1"]
    with pytest.raises(ValidationError, match="either base_url"):
        ModelSpec(model="m")
    with pytest.raises(ValidationError, match="either base_url"):
        ModelSpec(base_url="http://a/v1", upstreams=[{"base_url": "http://b/v1"}], model="m")
    with pytest.raises(ValidationError, match="each base_url once"):
        ModelSpec(upstreams=[{"base_url": "http://b/v1"}, {"base_url": "http://b/v1"}], model="m")


def test_the_client_dispatches_to_its_current_fleet():
    from episodes.client.batch.dispatch import dispatch_spec
    from episodes.types.spec import parse_spec

    spec = parse_spec(
        {
            "name": "f",
            "env": "kv-store",
            "tasks": [{"id": "t"}],
            "harness": {"command": "x"},
            "model": {"base_url": "http://old/v1", "model": "m", "params": {"seed": 1}},
        }
    )
    assert dispatch_spec(spec, None, None) is spec
    fleet = [UpstreamSpec(base_url="http://a/v1"), UpstreamSpec(base_url="http://b/v1", weight=2)]
    at = dispatch_spec(spec, 3, fleet)
    assert at.model is not None and at.model.base_url is None
    assert [(u.base_url, u.weight) for u in at.model.targets()] == [
        ("http://a/v1", 1.0),
        ("http://b/v1", 2.0),
    ]
    assert at.model.policy_version == 3 and at.model.params == {"seed": 1}
    assert spec.model is not None and spec.model.base_url == "http://old/v1"


async def test_sessions_spread_over_the_fleet_and_stick_to_their_upstream():
    async with (
        ScriptedUpstream(policy=lambda m, t: "a") as a,
        ScriptedUpstream(policy=lambda m, t: "b") as b,
    ):
        spec = fleet_spec(a, b)
        calls: list = []
        failures: list = []
        proxies = [proxy_for(spec, f"s{i}", calls, failures) for i in range(4)]
        for p in proxies:
            await p.start()
        try:
            for _ in range(3):
                for p in proxies:
                    await ask(p, stream=p.session_id == "s3")
        finally:
            for p in proxies:
                await p.stop()
    assert failures == []
    # Two sessions each (fewest sessions first on a tie), three calls each, never moved.
    assert sorted(set(sessions_of(a))) == ["s0", "s2"]
    assert sorted(set(sessions_of(b))) == ["s1", "s3"]
    assert len(a.chat_requests) == len(b.chat_requests) == 6
    names = {a.base_url: "a", b.base_url: "b"}
    assert {names[c["upstream"]] for c in calls} == {"a", "b"}
    assert all(c["upstream"] in names for c in calls)


async def test_a_session_moves_when_its_upstream_dies_keeping_its_session_id():
    async with (
        ScriptedUpstream(policy=lambda m, t: "ok") as a,
        ScriptedUpstream(policy=lambda m, t: "ok") as b,
    ):
        # retries 0: the move is not a retry of the dead one.
        spec = fleet_spec(a, b, retries=0)
        calls: list = []
        failures: list = []
        async with proxy_for(spec, "s-move", calls, failures) as p:
            assert await ask(p) == "ok"
            first = a if a.chat_requests else b
            other = b if first is a else a
            await first.stop()
            assert await ask(p) == "ok"
            assert await ask(p, stream=True) == "ok"
    assert failures == []
    assert sessions_of(first) == ["s-move"]
    assert sessions_of(other) == ["s-move", "s-move"]
    assert [c["upstream"] for c in calls] == [first.base_url, other.base_url, other.base_url]
    assert calls[1]["attempts"] == 2  # refused by the dead one, then served


async def test_model_error_only_when_no_upstream_can_serve():
    async with ScriptedUpstream() as a, ScriptedUpstream() as b:
        a.always_fail = b.always_fail = 500
        calls: list = []
        failures: list = []
        async with proxy_for(fleet_spec(a, b, retries=1), "s-dead", calls, failures) as p:
            with pytest.raises(openai.APIStatusError) as info:
                await ask(p)
    assert info.value.status_code == 502
    assert "after 4 attempt(s) on 2 upstreams: upstream HTTP 500" in info.value.message
    assert len(a.chat_requests) == len(b.chat_requests) == 2
    assert len(failures) == 1


async def test_429s_slow_a_call_without_charging_its_retries():
    async with ScriptedUpstream(policy=lambda m, t: "served") as a:
        a.fail(5, 429)  # no Retry-After: the proxy backs off on its own
        calls: list = []
        failures: list = []
        async with proxy_for(fleet_spec(a, retries=0), "s-429", calls, failures) as p:
            assert await ask(p) == "served"
    assert failures == []
    assert calls[0]["attempts"] == 6 and calls[0]["status"] == 200


async def test_429s_past_max_throttle_s_count_as_failures():
    async with ScriptedUpstream(policy=lambda m, t: "served") as a:
        a.always_fail = 429
        calls: list = []
        failures: list = []
        spec = fleet_spec(a, retries=1, max_throttle_s=0.05)
        async with proxy_for(spec, "s-429", calls, failures) as p:
            with pytest.raises(openai.APIStatusError):
                await ask(p)
    assert len(failures) == 1 and "upstream HTTP 429" in str(failures[0])


async def test_the_adaptive_limit_halves_per_wave_and_queues_calls_past_it():
    r = Replica("http://x/v1", ceiling=8)
    loop = asyncio.get_running_loop()
    sent = loop.time()
    r.throttle(sent)
    r.throttle(sent)  # the same wave: one cut
    assert r.limit == 4.0
    for _ in range(4):
        await r.acquire()
    waiter = asyncio.ensure_future(r.acquire())
    await asyncio.sleep(0)
    assert not waiter.done() and r.waiting == 1
    r.release()
    await waiter
    assert r.in_flight == 4 and r.waiting == 0
    cancelled = asyncio.ensure_future(r.acquire())
    await asyncio.sleep(0)
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert r.waiting == 0 and r.in_flight == 4
    for _ in range(40):
        r.succeeded()
    assert 4.0 < r.limit <= 8.0


async def _slow_stream(request: web.Request) -> web.StreamResponse:
    """A streamed answer whose head comes at once and whose end comes 0.3 s later."""
    await request.read()
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    delta = {**chunk, "choices": [{"index": 0, "delta": {"content": "ok"}}]}
    await resp.write(f"data: {json.dumps(delta)}\n\n".encode())
    await asyncio.sleep(0.3)
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


async def test_streams_at_once_in_one_session_give_their_places_back():
    app = web.Application()
    app.router.add_post("/v1/chat/completions", _slow_stream)
    runner = web.AppRunner(app)
    await runner.setup()
    sock = tcp_listener()
    await web.SockSite(runner, sock).start()
    base_url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    try:
        calls: list = []
        failures: list = []
        spec = ModelSpec(upstreams=[UpstreamSpec(base_url=base_url)], model="m")
        async with proxy_for(spec, "s-many", calls, failures) as p:
            texts = await asyncio.gather(*(ask(p, stream=True) for _ in range(4)))
            assert p._sender.route is not None
            (replica,) = p._sender.route.replicas
            assert texts == ["ok"] * 4
            assert replica.served == 4 and replica.in_flight == 0
    finally:
        await runner.cleanup()
    assert [c["upstream"] for c in calls] == [base_url] * 4


async def test_a_worker_takes_no_new_episodes_while_its_sessions_wait_on_the_fleet():
    from episodes.model import fleet as fleet_mod
    from episodes.session.registry import SessionRegistry
    from workers.backpressure import SessionSlots

    slots = SessionSlots(SessionRegistry(max_sessions=8))
    spec = ModelSpec(
        upstreams=[UpstreamSpec(base_url="http://saturated:1/v1", max_concurrency=1)], model="m"
    )
    routes = [fleet_mod.Route(spec) for _ in range(2)]
    (replica,) = {r for route in routes for r in route.replicas}
    for route in routes:
        assert route.pick(set()) is replica
    assert slots._has_room() and not fleet_mod.saturated()
    await replica.acquire()  # one session's call in flight: the limit (1) is full
    waiter = asyncio.ensure_future(replica.acquire())  # the other's waits
    await asyncio.sleep(0)
    assert fleet_mod.saturated() and not slots._has_room()
    replica.release()
    await waiter
    assert not fleet_mod.saturated() and slots._has_room()
    replica.release()
    for route in routes:
        route.close()
    assert replica.sessions == 0


async def test_the_worker_metrics_show_each_upstream():
    from prometheus_client import generate_latest

    from activities.telemetry import REGISTRY
    from episodes.model import fleet as fleet_mod

    spec = ModelSpec(upstreams=[UpstreamSpec(base_url="http://metrics:1/v1")], model="m")
    route = fleet_mod.Route(spec)
    (replica,) = route.replicas
    route.pick(set())
    await replica.acquire()
    replica.failure(refused=True)
    try:
        text = generate_latest(REGISTRY).decode()
    finally:
        replica.release()
        route.close()
    label = '{upstream="http://metrics:1/v1"}'
    for line in ("in_flight", "sessions", "ejected", "failed_total"):
        assert f"episodes_upstream_{line}{label} 1.0" in text, line
    assert f"episodes_upstream_limit{label} 256.0" in text
    assert "episodes_fleet_saturated " in text
