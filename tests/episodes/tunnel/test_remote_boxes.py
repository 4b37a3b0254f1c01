"""Modal, Prime and E2B boxes reach the session's tools and model through the stdio tunnel.

Against the in-repo fakes of their SDKs: a box is really started, the tunnel's
in-box end runs in it as a process of the box, and a client program in the box
(the official `mcp` and `openai` SDKs) calls a tool and the model at the box-loopback
addresses the harness is given. The services record both calls; a wrong token is
still refused; nothing outlives the session.
"""

from __future__ import annotations

import asyncio
import json
import sys
from urllib.parse import urlparse

import pytest

from episodes.model.scripted.server import ScriptedUpstream, echo_policy, kv_policy
from episodes.session.live import LiveSession
from episodes.session.services import AgentServices
from episodes.tunnel import stdio as tunnel
from episodes.types.model import ModelSpec
from episodes.types.spec import parse_spec
from tests.episodes.session.test_agent_session import UPSTREAM_KEY, agent_spec
from tests.support.backends import e2b_fake, modal_fake, prime_fake

pytestmark = pytest.mark.timeout(120)
BACKENDS = pytest.mark.parametrize(
    "backend", [modal_fake, prime_fake, e2b_fake], ids=["modal", "prime", "e2b"]
)

# Runs in the box with the harness's variables: one tool call, one model call.
CLIENT = r"""
import asyncio, json, os, sys
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from openai import OpenAI

async def tool(token):
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=10) as http:
        async with Client(streamable_http_client(os.environ["EPISODES_MCP_URL"],
                                                 http_client=http), cache=None) as c:
            names = [t.name for t in (await c.list_tools()).tools]
            r = await c.call_tool("put", {"key": "a", "value": "1"})
            return names, r.content[0].text

out = {}
out["tools"], out["result"] = asyncio.run(tool(os.environ["EPISODES_MCP_TOKEN"]))
reply = OpenAI().chat.completions.create(
    model="m", messages=[{"role": "user", "content": "hello"}])
out["reply"] = reply.choices[0].message.content
wrong = httpx2.post(os.environ["EPISODES_MCP_URL"], json={"jsonrpc": "2.0", "id": 1,
                   "method": "tools/list"}, headers={"Authorization": "Bearer not-the-token",
                   "Accept": "application/json, text/event-stream"}, timeout=10)
out["wrong_token"] = wrong.status_code
print(json.dumps(out), flush=True)
"""


def put(key: str, value: str) -> str:
    """Store a value."""
    return f"stored {key!r}"


async def _run_in_box(runtime, env: dict[str, str]) -> dict:
    proc = await runtime.open_process([sys.executable, "-c", CLIENT], env, None)
    out = b""
    while chunk := await proc.stdout.read(65536):
        out += chunk
    code = await proc.wait()
    err = (await proc.stderr.read()).decode(errors="replace")
    assert code == 0, err[-3000:]
    return json.loads(out.decode().strip().splitlines()[-1])


@BACKENDS
async def test_a_client_in_the_box_calls_a_tool_and_the_model_through_the_tunnel(backend):
    async with ScriptedUpstream(policy=echo_policy) as upstream:
        runtime = backend.make_runtime()
        await runtime.start()
        services = AgentServices(
            [put], ModelSpec(base_url=upstream.base_url, model="m"), session_id="s"
        )
        try:
            env = await services.start(runtime)
            assert services.bridge is not None and services.proxy is not None
            # The harness is given the tunnel's box-loopback ports, not the services'.
            mcp_port = urlparse(env["EPISODES_MCP_URL"]).port
            model_port = urlparse(env["OPENAI_BASE_URL"]).port
            assert mcp_port not in (None, services.bridge.port)
            assert model_port not in (None, services.proxy.port)
            assert services.mcp_url == env["EPISODES_MCP_URL"]

            events: list = []
            services.begin_turn(events)
            got = await _run_in_box(runtime, env)
            services.end_turn()
        finally:
            await services.stop()
            await runtime.stop()
    assert got["tools"] == ["put"] and got["result"] == "stored 'a'"
    assert got["reply"] == "you said: hello"
    assert got["wrong_token"] == 401
    kinds = [e["kind"] for e in events]
    assert kinds.count("tool_call") == 1 and kinds.count("model_call") == 1, kinds
    call = next(e for e in events if e["kind"] == "tool_call")
    assert call["arguments"] == {"key": "a", "value": "1"}
    assert len(upstream.chat_requests) == 1
    assert backend.leftovers() == []


@BACKENDS
async def test_stopping_the_services_ends_the_tunnel_in_the_box(backend):
    runtime = backend.make_runtime()
    await runtime.start()
    try:
        services = AgentServices([put], None, session_id="s")
        env = await services.start(runtime)
        port = urlparse(env["EPISODES_MCP_URL"]).port
        assert port is not None
        await services.stop()
        await services.stop()  # idempotent
        # The in-box end is gone: its port no longer accepts (the fake box is local).
        with pytest.raises(OSError):
            _, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5)
            w.close()
    finally:
        await runtime.stop()


@BACKENDS
async def test_an_in_box_end_that_cannot_start_is_one_clear_error(backend, monkeypatch):
    monkeypatch.setattr(tunnel, "RELAY_SOURCE", "import sys; sys.exit('no python here')")
    runtime = backend.make_runtime()
    await runtime.start()
    try:
        services = AgentServices([put], None, session_id="s")
        with pytest.raises(
            tunnel.TunnelFailed,
            match=r"harness\.runtime: .*needs python3 on the PATH.*no python here",
        ):
            await services.start(runtime)
        assert services.bridge is not None
        # The bridge it had started is stopped again.
        with pytest.raises(OSError):
            _, w = await asyncio.open_connection("127.0.0.1", services.bridge.port)
            w.close()
    finally:
        await runtime.stop()


@BACKENDS
async def test_a_kv_agent_episode_on_a_remote_box(backend, monkeypatch):
    """The whole session (LLM harness, env tools, model) in a fake remote box: the
    reward comes from the env's own store, which only the tunnelled tool calls fill."""
    import episodes.session.launch

    kind = backend.NAME.split("-")[0]
    monkeypatch.setattr(
        episodes.session.launch, "make_runtime", lambda *a, **k: backend.make_runtime()
    )
    monkeypatch.setenv("EPISODES_TEST_UPSTREAM_KEY", UPSTREAM_KEY)
    async with ScriptedUpstream(policy=kv_policy, key=UPSTREAM_KEY) as upstream:
        data = agent_spec(upstream.base_url)
        # The fake box runs local processes: this venv's Python has the harness's packages.
        data["harness"] = {
            "command": [sys.executable, "-m", "episodes.harness.reference.llm", "--max-steps", "8"],
            "runtime": {"type": kind},
        }
        spec = parse_spec(data)
        session = LiveSession(spec, spec.tasks[0], 0, f"s-{kind}")
        try:
            await session.open()
            result = await session.turn(0)
            score = await session.score("env_done")
            transcript = session.transcript("env_done")
        finally:
            await session.close()
    assert result.termination == "env_done" and score.reward == 1.0
    assert session.env.store == {"a": "1", "b": "2"}
    events = transcript.turns[0].events
    assert [e["name"] for e in events if e.get("kind") == "tool_call"] == ["put", "put"]
    assert sum(e.get("kind") == "model_call" for e in events) == 3
    assert backend.leftovers() == []


@pytest.mark.parametrize("kind", ["modal", "prime", "e2b"])
def test_a_model_with_a_remote_runtime_is_a_valid_spec(kind):
    spec = parse_spec(
        {
            "name": "m",
            "env": "script",
            "tasks": [{"id": "t"}],
            "harness": {"command": "x", "runtime": {"type": kind}},
            "model": {"base_url": "http://127.0.0.1:1/v1", "model": "m"},
        },
        source="m.yaml",
    )
    assert spec.model is not None and spec.harness.runtime.type == kind
