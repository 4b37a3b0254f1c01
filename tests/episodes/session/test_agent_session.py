"""A whole agent episode in one LiveSession: env tools over the bridge, model via the proxy.

In-process (no Temporal) so the wiring is tested apart from orchestration: the LLM
harness runs as a real process, the scripted upstream is a real HTTP server, and
the transcript must hold every tool call and model call of each turn, in order.
"""

from __future__ import annotations

import os

import pytest

from episodes.local import run_episode_local
from episodes.model.scripted.server import ScriptedUpstream, kv_policy
from episodes.session.live import LiveSession
from episodes.types.results import Task
from episodes.types.spec import parse_spec

pytestmark = pytest.mark.timeout(120)

UPSTREAM_KEY = "sk-upstream-canary-7f3a"


def agent_spec(base_url: str, **extra) -> dict:
    return {
        "name": "kv-agent",
        "env": "kv-store",
        "tasks": [{"id": "ab", "data": {"goal": {"a": "1", "b": "2"}}}],
        "max_turns": 4,
        "harness": {"command": "{python} -m episodes.harness.reference.llm --max-steps 8"},
        "model": {
            "base_url": base_url,
            "model": "scripted",
            "api_key_env": "EPISODES_TEST_UPSTREAM_KEY",
            "params": {"temperature": 0.0},
            "token_data": True,
            "retries": 2,
        },
        **extra,
    }


@pytest.fixture
def upstream_key(monkeypatch):
    monkeypatch.setenv("EPISODES_TEST_UPSTREAM_KEY", UPSTREAM_KEY)


async def test_kv_agent_episode_records_tool_and_model_calls(upstream_key):
    async with ScriptedUpstream(policy=kv_policy, key=UPSTREAM_KEY) as upstream:
        spec = parse_spec(agent_spec(upstream.base_url))
        session = LiveSession(spec, spec.tasks[0], 0, "s-agent")
        try:
            await session.open()
            result = await session.turn(0)
            transcript = session.transcript("env_done")
            score = await session.score("env_done")
        finally:
            await session.close()
        # The reward reads the env's store, which only the tools changed.
        assert session.env.store == {"a": "1", "b": "2"}
        assert score.reward == 1.0
        assert result.termination == "env_done"
        events = transcript.turns[0].events
        kinds = [e.get("kind") for e in events if isinstance(e, dict)]
        tool_calls = [e for e in events if e.get("kind") == "tool_call"]
        model_calls = [e for e in events if e.get("kind") == "model_call"]
        assert [c["name"] for c in tool_calls] == ["put", "put"]
        assert tool_calls[0]["arguments"] == {"key": "a", "value": "1"}
        assert len(model_calls) == 3  # put a, put b, done
        # Each tool call comes after the model call that asked for it.
        assert kinds.index("model_call") < kinds.index("tool_call")
        first = model_calls[0]
        assert first["request"]["temperature"] == 0.0
        assert first["response"]["choices"][0]["logprobs"] is not None
        assert "prompt_token_ids" in first["response"]
        assert first["usage"]["total_tokens"] > 0
        # The upstream saw its key; the harness only ever had its session token.
        seen = {r["headers"].get("Authorization") for r in upstream.chat_requests}
        assert seen == {f"Bearer {UPSTREAM_KEY}"}
        assert UPSTREAM_KEY not in str(transcript.model_dump())


async def test_bridge_and_proxy_refuse_after_the_session(upstream_key):
    import httpx

    async with ScriptedUpstream(policy=kv_policy, key=UPSTREAM_KEY) as upstream:
        spec = parse_spec(agent_spec(upstream.base_url))
        session = LiveSession(spec, spec.tasks[0], 0, "s-closed")
        await session.open()
        env = dict(session.services.harness_env)
        await session.close()
    async with httpx.AsyncClient() as client:
        for url in (env["EPISODES_MCP_URL"], env["OPENAI_BASE_URL"] + "/models"):
            with pytest.raises(httpx.ConnectError):
                await client.get(url, headers={"Authorization": "Bearer x"})


async def test_upstream_always_failing_ends_model_error(upstream_key):
    async with ScriptedUpstream(policy=kv_policy, key=UPSTREAM_KEY) as upstream:
        upstream.always_fail = 500
        result = await run_episode_local(
            parse_spec(agent_spec(upstream.base_url)), Task(id="ab", data={"goal": {"a": "1"}})
        )
    assert result.termination == "model_error"
    # The recorded cause comes first (summaries show the first line), not the harness's
    # own "HTTP Error 500", which follows it.
    assert (result.error or "").startswith("model call failed"), result.error
    assert UPSTREAM_KEY not in (result.error or "")
    assert os.environ["EPISODES_TEST_UPSTREAM_KEY"] == UPSTREAM_KEY
