"""An upstream that sends its head and then breaks the body (an inference server
OOM-killed mid-answer, a crashing load balancer), issue 40: a failure like one before
the head. Counted against the replica (never credited as a success), retried, moved to
a healthy replica, the replica ejected; what reaches the harness recorded and reported.

A real loopback server sends `Content-Length: 5000`, 16 bytes of the body, then resets
the connection. Nothing is mocked."""

from __future__ import annotations

import asyncio

import openai
import pytest

from episodes.model.fleet import EJECT_AFTER, Replica, fleet
from episodes.model.proxy import ModelProxy
from episodes.model.scripted.server import ScriptedUpstream, echo_policy
from episodes.net import tcp_listener
from episodes.types.model import ModelSpec

pytestmark = pytest.mark.timeout(60)

HELLO = [{"role": "user", "content": "hello there"}]


class BreakingUpstream:
    """Answers every request with `status`, `Content-Length: 5000`, 16 bytes, then a reset."""

    def __init__(self, status: int, *, stream: bool = False) -> None:
        self.status = status
        # A stream's first event whole (what the harness's client reads before the break).
        self.content_type = "text/event-stream" if stream else "application/json"
        self.piece = b'data: {"choices":[]}\n\n' if stream else b'{"id": "chatcmp'
        self.hits = 0
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> BreakingUpstream:
        sock = tcp_listener()
        self.base_url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
        self._server = await asyncio.start_server(self._serve, sock=sock)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                await reader.readexactly(length)
                self.hits += 1
                writer.write(
                    b"HTTP/1.1 %d X\r\nContent-Type: %s\r\nContent-Length: 5000\r\n\r\n"
                    % (self.status, self.content_type.encode())
                )
                writer.write(self.piece)  # 16 or 22 bytes of 5000
                await writer.drain()
                await asyncio.sleep(0.05)
                writer.transport.abort()
                return
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


def _replica(up: BreakingUpstream | ScriptedUpstream) -> Replica:
    return fleet().replicas[up.base_url]


async def _ask(proxy: ModelProxy, stream: bool = False) -> str:
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


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("status", [200, 500])
async def test_a_body_that_breaks_moves_the_call_to_the_healthy_replica(status, stream):
    calls: list = []
    failures: list = []
    async with (
        BreakingUpstream(status, stream=stream) as broken,
        ScriptedUpstream(policy=echo_policy) as healthy,
    ):
        # Listed first: the session's first call goes to it (ties go to the first).
        spec = ModelSpec(
            upstreams=[{"base_url": broken.base_url}, {"base_url": healthy.base_url}],
            model="m",
            retries=1,
        )
        async with ModelProxy(
            spec, on_call=calls.append, on_failure=failures.append, backoff_s=0.01
        ) as proxy:
            if stream and status == 200:
                # A stream whose head reached the harness cannot move: it is cut and
                # reported, and counted: the session stays on its replica (as after any
                # failed attempt) until EJECT_AFTER of them in a row eject it.
                for _ in range(EJECT_AFTER):
                    with pytest.raises(openai.APIError, match="model stream broke"):
                        await _ask(proxy, stream=True)
                assert failures and "model stream broke" in str(failures[0])
                assert all((c.get("error") or "").startswith("model stream broke") for c in calls)
                assert {c["upstream"] for c in calls} == {broken.base_url}
                assert _replica(broken).failures == EJECT_AFTER
                calls.clear()
            text = await _ask(proxy, stream=stream)
            bad = _replica(broken)
            assert text and healthy.chat_requests
            assert bad.served == 0 and bad.failed >= 1, "a broken body is never a success"
            assert bad.ejected_until > asyncio.get_running_loop().time() or bad.failures
            assert [c["upstream"] for c in calls] == [healthy.base_url]
            assert calls[0]["status"] == 200 and calls[0].get("error") is None


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("status", [200, 500])
async def test_a_body_that_breaks_on_the_only_replica_is_a_model_error(status, stream):
    calls: list = []
    failures: list = []
    async with BreakingUpstream(status, stream=stream) as broken:
        spec = ModelSpec(base_url=broken.base_url, model="m", retries=1)
        async with ModelProxy(
            spec, on_call=calls.append, on_failure=failures.append, backoff_s=0.01
        ) as proxy:
            with pytest.raises(openai.APIError) as caught:
                await _ask(proxy, stream=stream)
            bad = _replica(broken)
    if stream and status == 200:  # the head was passed on: the stream ends with the error
        assert "model stream broke" in str(caught.value)
        assert broken.hits == 1
    else:  # retried, then given up on: 502, as for a failure before the head
        assert isinstance(caught.value, openai.APIStatusError)
        assert caught.value.status_code == 502, caught.value
        assert broken.hits == 2
        assert "broke" in str(caught.value)
    assert len(failures) == 1, "the episode ends model_error"
    assert len(calls) == 1 and calls[0].get("error"), "what reached the harness is recorded"
    assert calls[0]["upstream"] == broken.base_url
    assert bad.served == 0 and bad.failed == broken.hits, "never credited with a success"
