"""The LLM harness as a real process over the wire protocol: scripted upstream, proxy, MCP.

What is under test: the conversation lives in the harness across turns, tool calls
go to a real MCP server over streamable HTTP with the bearer token, every model call
goes through the proxy with the session token only, and model failures come back as
one-line `error` packets while the harness stays up.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import tests.support
from episodes.harness import NativeDriver
from episodes.model.proxy import ModelProxy
from episodes.model.scripted.server import ScriptedUpstream, kv_policy
from episodes.types.model import ModelSpec

pytestmark = pytest.mark.timeout(120)

KEY = "sk-upstream-secret-harness"
MCP_TOKEN = "mcp-token-for-tests"
SERVER = Path(tests.support.__file__).with_name("kv_mcp_server.py")


@pytest.fixture
def mcp_url():
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), MCP_TOKEN], stdout=subprocess.PIPE, text=True
    )
    try:
        port = int(proc.stdout.readline())
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)


async def run_turns(runtime, env, messages, *args: str):
    argv = [sys.executable, "-m", "episodes.harness.reference.llm", "--max-steps", "6", *args]
    session = NativeDriver(runtime, argv, env=env, ready_timeout_s=30)
    await session.start()
    try:
        return [await session.turn(i, m, timeout_s=30) for i, m in enumerate(messages)]
    finally:
        await session.stop()


@pytest.mark.parametrize("stream", [False, True])
async def test_conversation_is_kept_across_turns_without_tools(runtime, stream):
    calls: list = []
    async with ScriptedUpstream(["hi, I am a model", "I remember you"], key=KEY) as up:
        spec = ModelSpec(base_url=up.base_url, model="m", params={"temperature": 0})
        async with ModelProxy(spec, upstream_key=KEY, on_call=calls.append) as proxy:
            records = await run_turns(
                runtime,
                proxy.env(),
                ["hello", {"content": "do you remember?"}],
                *(["--stream"] if stream else []),
            )
    assert [r.reply for r in records] == ["hi, I am a model", "I remember you"]
    assert all(r.error is None for r in records)
    assert [e["kind"] for e in records[0].events] == ["model_step"]
    second = up.chat_requests[1]["body"]["messages"]
    assert [(m["role"], m["content"]) for m in second] == [
        ("user", "hello"),
        ("assistant", "hi, I am a model"),
        ("user", "do you remember?"),
    ]
    assert "tools" not in up.chat_requests[0]["body"]
    assert all(r["headers"]["Authorization"] == f"Bearer {KEY}" for r in up.chat_requests)
    assert len(calls) == 2 and all(c["stream"] is stream for c in calls)


async def test_kv_goal_through_mcp_tools_over_two_turns(runtime, mcp_url):
    goal = {"goal": {"a": "1", "b": "2"}}
    calls: list = []
    async with ScriptedUpstream(policy=kv_policy, key=KEY) as up:
        spec = ModelSpec(base_url=up.base_url, model="m", token_data=True)
        async with ModelProxy(spec, upstream_key=KEY, on_call=calls.append) as proxy:
            env = {**proxy.env(), "EPISODES_MCP_URL": mcp_url, "EPISODES_MCP_TOKEN": MCP_TOKEN}
            first, second = await run_turns(
                runtime,
                env,
                [
                    f"Make the store hold exactly {json.dumps(goal)}. Reply done when finished.",
                    "again?",
                ],
                "--stream",
            )
    assert first.error is None and first.reply == "done"
    tool_events = [e for e in first.events if e["kind"] == "tool_result"]
    assert [(e["name"], json.loads(e["arguments"])) for e in tool_events] == [
        ("put", {"key": "a", "value": "1"}),
        ("put", {"key": "b", "value": "2"}),
    ]
    assert [e["result"] for e in tool_events] == ["ok: a=1", "ok: b=2"]
    assert [e["kind"] for e in first.events].count("model_step") == 3
    # Turn 2 sees turn 1's tool calls in the conversation, so nothing is put twice.
    assert second.reply == "done" and not [e for e in second.events if e["kind"] == "tool_result"]
    tools = {t["function"]["name"] for t in up.chat_requests[0]["body"]["tools"]}
    assert tools == {"put", "get", "list_keys", "delete"}
    # Every model step was recorded by the proxy with token data.
    assert len(calls) == 4 and all(c["response"]["choices"][0].get("token_ids") for c in calls)


async def test_bad_mcp_token_fails_the_start_with_a_clear_line(runtime, mcp_url):
    from episodes.errors import HarnessStartFailed

    env = {
        "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
        "OPENAI_API_KEY": "x",
        "EPISODES_MCP_URL": mcp_url,
        "EPISODES_MCP_TOKEN": "wrong",
    }
    session = NativeDriver(
        runtime, [sys.executable, "-m", "episodes.harness.reference.llm"], env=env
    )
    with pytest.raises(HarnessStartFailed) as info:
        await session.start()
    assert "cannot list the MCP tools at" in info.value.stderr_tail


async def test_model_errors_are_one_line_error_packets_and_the_harness_stays_up(runtime):
    async with ScriptedUpstream(["recovered"], key=KEY) as up:
        up.always_fail = 500
        spec = ModelSpec(base_url=up.base_url, model="m", retries=1)
        async with ModelProxy(spec, upstream_key=KEY, backoff_s=0.01) as proxy:
            argv = [sys.executable, "-m", "episodes.harness.reference.llm"]
            session = NativeDriver(runtime, argv, env=proxy.env())
            await session.start()
            try:
                failed = await session.turn(0, "hello", timeout_s=30)
                up.always_fail = None
                ok = await session.turn(1, "hello again", timeout_s=30)
            finally:
                await session.stop()
            assert proxy.failure is not None
    assert failed.error_type == "harness_error"
    assert failed.error == (
        "harness reported an error in turn 0: model call failed: HTTP 502: "
        "model call failed after 2 attempt(s): upstream HTTP 500: scripted failure (HTTP 500)"
    )
    assert "\n" not in failed.error and KEY not in failed.error
    assert ok.error is None and ok.reply == "recovered"
