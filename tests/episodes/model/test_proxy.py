"""The model proxy between the real OpenAI client and a real scripted upstream, all on loopback."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from episodes.errors import ModelError
from episodes.model.proxy import ModelProxy
from episodes.model.scripted.server import ScriptedUpstream, token_id, tokenize
from episodes.types.model import ModelSpec

pytestmark = pytest.mark.timeout(60)

KEY = "sk-upstream-secret-0123456789"
HELLO = [{"role": "user", "content": "hello there"}]


@pytest.fixture
async def upstream():
    up = ScriptedUpstream(key=KEY)
    await up.start()
    yield up
    await up.stop()


def make_proxy(upstream: ScriptedUpstream, **spec_fields) -> tuple[ModelProxy, list, list]:
    calls: list = []
    failures: list = []
    spec = ModelSpec(
        base_url=upstream.base_url,
        model="the-model",
        api_key_env="EPISODES_TEST_UPSTREAM_KEY",
        **spec_fields,
    )
    proxy = ModelProxy(
        spec,
        upstream_key=KEY,
        on_call=calls.append,
        on_failure=failures.append,
        backoff_s=0.01,
    )
    return proxy, calls, failures


def client(proxy: ModelProxy, **kwargs) -> openai.AsyncOpenAI:
    env = proxy.env()
    # max_retries=0: the proxy retries; the SDK's own retries would hide what it did.
    return openai.AsyncOpenAI(
        base_url=env["OPENAI_BASE_URL"], api_key=env["OPENAI_API_KEY"], max_retries=0, **kwargs
    )


async def test_plain_call_is_forwarded_with_model_params_key_and_recorded(upstream):
    upstream.script = ["the answer is 42"]
    proxy, calls, failures = make_proxy(
        upstream, params={"temperature": 0.0, "max_tokens": 64}, token_data=True
    )
    async with proxy:
        answer = await client(proxy).chat.completions.create(
            model="whatever-the-harness-wants", messages=HELLO, temperature=1.5, max_tokens=5
        )
    assert answer.choices[0].message.content == "the answer is 42"
    (seen,) = upstream.chat_requests
    # The upstream saw the upstream key and the enforced settings, never the session token.
    assert seen["headers"]["Authorization"] == f"Bearer {KEY}"
    assert proxy.token not in json.dumps(seen)
    body = seen["body"]
    assert body["model"] == "the-model"
    assert (body["temperature"], body["max_tokens"]) == (0.0, 64)
    assert body["logprobs"] is True and body["return_token_ids"] is True
    assert body["return_tokens_as_token_ids"] is True
    # One record, with the token data the upstream returned.
    (record,) = calls
    assert record["kind"] == "model_call" and record["stream"] is False
    assert record["request"]["model"] == "the-model" and record["attempts"] == 1
    response = record["response"]
    toks = tokenize("the answer is 42")
    assert response["choices"][0]["token_ids"] == [token_id(t) for t in toks]
    assert [e["token"] for e in response["choices"][0]["logprobs"]["content"]] == [
        f"token_id:{token_id(t)}" for t in toks
    ]
    assert response["prompt_token_ids"] and record["usage"]["completion_tokens"] == len(toks)
    assert record["ms"] > 0 and failures == [] and proxy.failure is None


async def test_streamed_call_passes_chunks_through_and_records_the_assembled_response(upstream):
    upstream.script = [
        "let me store it",
        {"content": None, "tool_calls": [{"name": "put", "arguments": {"key": "a", "value": "1"}}]},
    ]
    proxy, calls, _ = make_proxy(upstream, token_data=True)
    async with proxy:
        c = client(proxy)
        text = ""
        async for chunk in await c.chat.completions.create(model="x", messages=HELLO, stream=True):
            if chunk.choices and chunk.choices[0].delta.content:
                text += chunk.choices[0].delta.content
        assert text == "let me store it"
        args = ""
        async for chunk in await c.chat.completions.create(model="x", messages=HELLO, stream=True):
            for call in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
                args += call.function.arguments or ""
        assert json.loads(args) == {"key": "a", "value": "1"}
    first, second = calls
    assert first["stream"] and first["request"]["stream_options"] == {"include_usage": True}
    choice = first["response"]["choices"][0]
    assert choice["message"]["content"] == "let me store it"
    assert choice["token_ids"] == [token_id(t) for t in tokenize("let me store it")]
    assert len(choice["logprobs"]["content"]) == len(choice["token_ids"])
    assert first["response"]["prompt_token_ids"] and first["usage"]["completion_tokens"] == 4
    (call,) = second["response"]["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "put" and json.loads(call["function"]["arguments"]) == {
        "key": "a",
        "value": "1",
    }
    assert second["response"]["choices"][0]["finish_reason"] == "tool_calls"


async def test_wrong_or_missing_token_is_401_and_never_forwarded(upstream):
    upstream.script = ["never"]
    proxy, calls, _ = make_proxy(upstream)
    async with proxy:
        bad = openai.AsyncOpenAI(base_url=proxy.base_url, api_key="wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            await bad.chat.completions.create(model="x", messages=HELLO)
        async with httpx.AsyncClient() as h:
            r = await h.post(f"{proxy.base_url}/chat/completions", json={"messages": HELLO})
            assert r.status_code == 401 and "error" in r.json()
            r = await h.get(f"{proxy.base_url}/models")
            assert r.status_code == 401
        models = await client(proxy).models.list()
        assert [m.id for m in models.data] == ["the-model"]
    assert upstream.chat_requests == [] and calls == []


async def test_5xx_and_429_then_success_are_retried_and_recorded_once(upstream):
    upstream.script = ["finally", "again"]
    upstream.fail(2, 500)
    proxy, calls, failures = make_proxy(upstream, retries=3)
    async with proxy:
        c = client(proxy)
        answer = await c.chat.completions.create(model="x", messages=HELLO)
        assert answer.choices[0].message.content == "finally"
        upstream.fail(1, 429)
        text = ""
        async for chunk in await c.chat.completions.create(model="x", messages=HELLO, stream=True):
            if chunk.choices and chunk.choices[0].delta.content:
                text += chunk.choices[0].delta.content
        assert text == "again"
    assert len(upstream.chat_requests) == 5
    assert [r["attempts"] for r in calls] == [3, 2]
    assert failures == [] and proxy.failure is None


@pytest.mark.parametrize("stream", [False, True])
async def test_always_500_answers_502_and_reports_a_model_error(upstream, stream):
    upstream.always_fail = 500
    proxy, calls, failures = make_proxy(upstream, retries=2)
    async with proxy:
        with pytest.raises(openai.APIStatusError) as info:
            result = await client(proxy).chat.completions.create(
                model="x", messages=HELLO, stream=stream
            )
            async for _ in result:
                pass
    assert info.value.status_code == 502
    assert "after 3 attempt(s): upstream HTTP 500" in info.value.message
    assert len(upstream.chat_requests) == 3
    (err,) = failures
    assert isinstance(err, ModelError) and proxy.failure is err
    assert str(err).startswith("model call failed after 3 attempt(s)") and "\n" not in str(err)
    assert KEY not in str(err) and KEY not in info.value.message
    assert calls[0]["status"] == 502 and calls[0]["error"] == str(err)


async def test_other_4xx_pass_through_unretried(upstream):
    upstream.script = []  # exhausted: the scripted upstream answers 400
    proxy, calls, failures = make_proxy(upstream, retries=3)
    async with proxy:
        with pytest.raises(openai.BadRequestError, match="script is exhausted"):
            await client(proxy).chat.completions.create(model="x", messages=HELLO)
    assert len(upstream.chat_requests) == 1 and failures == []
    assert calls[0]["status"] == 400


async def test_unreachable_upstream_is_retried_then_a_model_error():
    spec = ModelSpec(base_url="http://127.0.0.1:9/v1", model="m", retries=1, timeout_s=2)
    proxy = ModelProxy(spec, backoff_s=0.01)
    async with proxy:
        with pytest.raises(openai.InternalServerError) as info:
            await client(proxy).chat.completions.create(model="x", messages=HELLO)
    assert info.value.status_code == 502
    assert proxy.failure is not None and "unreachable" in str(proxy.failure)


async def test_missing_upstream_key_env_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("EPISODES_NO_SUCH_KEY", raising=False)
    spec = ModelSpec(
        base_url="http://127.0.0.1:9/v1", model="m", api_key_env="EPISODES_NO_SUCH_KEY"
    )
    with pytest.raises(ModelError, match="EPISODES_NO_SUCH_KEY is not set"):
        ModelProxy(spec)
    monkeypatch.setenv("EPISODES_NO_SUCH_KEY", "k")
    assert ModelProxy(spec)._key == "k"


async def test_after_stop_connections_are_refused_and_stop_is_idempotent(upstream, tmp_path):
    upstream.script = ["over uds", "x"]
    proxy, _, _ = make_proxy(upstream)
    proxy.uds_path = str(tmp_path / "proxy.sock")
    await proxy.start()
    url = proxy.base_url
    transport = httpx.AsyncHTTPTransport(uds=proxy.uds_path)
    async with httpx.AsyncClient(transport=transport) as h:
        r = await h.post(
            "http://proxy/v1/chat/completions",
            json={"messages": HELLO},
            headers={"Authorization": f"Bearer {proxy.token}"},
        )
        assert r.json()["choices"][0]["message"]["content"] == "over uds"
    await proxy.stop()
    await proxy.stop()
    async with httpx.AsyncClient() as h:
        with pytest.raises(httpx.ConnectError):
            await h.get(f"{url}/models")
    with pytest.raises(RuntimeError, match="stopped"):
        await proxy.start()


async def test_policy_version_is_recorded_and_session_and_salt_go_upstream(upstream):
    """Sticky routing and per-version KV isolation, as the real upstream sees them."""
    upstream.script = ["one", "two"]
    calls: list = []

    def proxy_for(version: int) -> ModelProxy:
        spec = ModelSpec(
            base_url=upstream.base_url,
            model="m",
            api_key_env="EPISODES_TEST_UPSTREAM_KEY",
            policy_version=version,
            cache_salt=True,
        )
        return ModelProxy(spec, upstream_key=KEY, on_call=calls.append, session_id="s-42")

    for version in (3, 4):
        async with proxy_for(version) as proxy:
            await client(proxy).chat.completions.create(model="x", messages=HELLO)
    first, second = upstream.chat_requests
    assert first["headers"]["X-Session-ID"] == second["headers"]["X-Session-ID"] == "s-42"
    assert first["body"]["cache_salt"] == "episodes-policy-3"
    assert second["body"]["cache_salt"] == "episodes-policy-4"
    assert [c["policy_version"] for c in calls] == [3, 4]


async def test_no_salt_unless_asked_and_a_salt_needs_a_version(upstream):
    upstream.script = ["one"]
    proxy, calls, _ = make_proxy(upstream)
    async with proxy:
        await client(proxy).chat.completions.create(model="x", messages=HELLO)
    (seen,) = upstream.chat_requests
    assert "cache_salt" not in seen["body"] and "X-Session-ID" not in seen["headers"]
    assert calls[0]["policy_version"] is None
    with pytest.raises(ValueError, match=r"cache_salt: true needs model.policy_version"):
        ModelSpec(base_url="http://h/v1", model="m", cache_salt=True)


# -- JSON nested past MAX_JSON_DEPTH (issue 19) -------------------------------------------

DEEP = b"[" * 5000 + b"]" * 5000


class RawUpstream:
    """An upstream answering every chat call with the same raw bytes (real HTTP)."""

    def __init__(self, status: int, body: bytes, content_type: str) -> None:
        self.status, self.body, self.content_type = status, body, content_type
        self.calls = 0

    async def __aenter__(self) -> RawUpstream:
        from aiohttp import web

        from episodes.net import tcp_listener

        async def chat(request: web.Request) -> web.Response:
            self.calls += 1
            return web.Response(
                body=self.body, status=self.status, headers={"Content-Type": self.content_type}
            )

        app = web.Application()
        app.router.add_post("/v1/chat/completions", chat)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        sock = tcp_listener()
        self.base_url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
        await web.SockSite(self._runner, sock).start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._runner.cleanup()


ANSWERS = {
    "plain": (200, b'{"choices":[],"deep":' + DEEP + b"}", "application/json"),
    "stream": (
        200,
        b'data: {"choices":[],"deep":' + DEEP + b"}\n\ndata: [DONE]\n\n",
        "text/event-stream",
    ),
    "error-body": (500, b'{"error":' + DEEP + b"}", "application/json"),
}


@pytest.mark.parametrize("answer", sorted(ANSWERS))
async def test_an_upstream_answer_nested_too_deep_is_a_model_error(answer):
    status, body, ctype = ANSWERS[answer]
    async with RawUpstream(status, body, ctype) as up:
        spec = ModelSpec(base_url=up.base_url, model="m", retries=1)
        calls: list = []
        proxy = ModelProxy(spec, upstream_key=KEY, on_call=calls.append, backoff_s=0.01)
        async with proxy:
            http = httpx.AsyncClient(headers={"Authorization": f"Bearer {proxy.token}"})
            async with http:
                resp = await http.post(
                    proxy.base_url + "/chat/completions",
                    json={"messages": HELLO, "stream": answer == "stream"},
                    timeout=30,
                )
    if answer != "stream":  # a stream's bytes were passed on before its end was read
        assert resp.status_code == 502
    assert proxy.failure is not None, resp.text[:200]
    assert "deeper than 128 levels" in str(proxy.failure) or answer == "error-body"
    assert "\n" not in str(proxy.failure)
    # What is recorded can be serialized (no RecursionError later, in the converter).
    json.dumps(calls)
    assert len(calls) == 1


async def test_a_request_nested_too_deep_is_refused_and_not_forwarded():
    async with RawUpstream(200, b'{"choices":[]}', "application/json") as up:
        spec = ModelSpec(base_url=up.base_url, model="m")
        calls: list = []
        proxy = ModelProxy(spec, upstream_key=KEY, on_call=calls.append)
        async with proxy:
            body = b'{"messages":' + DEEP + b"}"
            async with httpx.AsyncClient() as http:
                resp = await http.post(
                    proxy.base_url + "/chat/completions",
                    content=body,
                    headers={
                        "Authorization": f"Bearer {proxy.token}",
                        "Content-Type": "application/json",
                    },
                )
    assert resp.status_code == 400 and "deeper than 128 levels" in resp.text
    assert up.calls == 0 and calls == [] and proxy.failure is None
