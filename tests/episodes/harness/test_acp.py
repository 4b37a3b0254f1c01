"""AcpDriver against a real ACP agent process (tests/support/harnesses/acp_agent.py)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
import time

import pytest

from episodes.errors import HarnessStartFailed
from episodes.harness.acp import AcpAllowList, AcpDriver, http_mcp_server, prompt_blocks
from tests.support import HARNESSES
from tests.support.procs import assert_group_gone

AGENT = str(HARNESSES / "acp_agent.py")
FAST = {"ready_timeout_s": 15.0, "stop_timeout_s": 1.0, "cancel_grace_s": 2.0}


def agent(runtime, mode: str = "ok", **kwargs) -> AcpDriver:
    return AcpDriver(runtime, [sys.executable, AGENT, mode], **{**FAST, **kwargs})


@contextlib.asynccontextmanager
async def started(runtime, mode: str = "ok", **kwargs):
    s = agent(runtime, mode, **kwargs)
    await s.start()
    try:
        yield s
    finally:
        await s.stop()
        assert not s.alive
        assert_group_gone(s.pid)


def kinds(record) -> list[str]:
    return [e.get("sessionUpdate", next(iter(e))) for e in record.events]


async def test_turns_keep_memory_in_one_process_and_stream_updates(runtime):
    seen: list = []

    async def on_event(event):
        await asyncio.sleep(0)
        seen.append(event)

    async with started(runtime) as s:
        assert s.alive and s.session_id == f"s-{s.pid}"
        assert s.agent_info["agentCapabilities"]["mcpCapabilities"]["http"] is True
        replies = []
        for n, text in enumerate(["alpha", "beta", "gamma"], start=1):
            record = await s.turn(n, text, timeout_s=10, on_event=on_event if n == 1 else None)
            assert record.error is None and record.turn == n and record.message == text
            replies.append(record.reply)
        assert replies[2] == {
            "text": f"pid={s.pid};count=3;seen=alpha|beta|gamma",
            "stop_reason": "end_turn",
        }
        assert all(r["text"].startswith(f"pid={s.pid};count={i}") for i, r in enumerate(replies, 1))
        first = seen
        assert kinds_of(first) == ["agent_thought_chunk"] + ["agent_message_chunk"] * 4
        assert first[0]["content"] == {"type": "text", "text": "on 'alpha'"}
    assert s.returncode == 0  # it exited on end of stdin, no signal needed
    assert "initialize from episodes" in s.stderr_tail


def kinds_of(events) -> list[str]:
    return [e["sessionUpdate"] for e in events]


async def test_messages_map_to_prompt_blocks(runtime):
    assert prompt_blocks({"prompt": [{"type": "text", "text": "a"}]})[0].text == "a"
    assert prompt_blocks({"x": [1]})[0].text == '{"x": [1]}'
    with pytest.raises(ValueError):
        prompt_blocks({"prompt": [{"type": "nope"}]})
    with pytest.raises(ValueError):
        prompt_blocks(float("nan"))
    async with started(runtime) as s:
        record = await s.turn(
            1,
            {"prompt": [{"type": "text", "text": "one "}, {"type": "text", "text": "two"}]},
            timeout_s=10,
        )
        assert record.reply["text"].endswith("seen=one two")
        record = await s.turn(2, {"task": 7}, timeout_s=10)
        assert record.reply["text"].endswith('|{"task": 7}')


@pytest.mark.parametrize(
    ("policy", "title", "outcome"),
    [
        ("allow", "rm -rf build", "selected:yes"),
        ("deny", "rm -rf build", "selected:no"),
        ({"allow": ["pytest"]}, "pytest", "selected:yes"),
        ({"allow": ["pytest"]}, "curl evil", "selected:no"),
        (AcpAllowList(allow=["execute"]), "by kind", "selected:yes"),
    ],
)
async def test_permission_requests_follow_the_policy(runtime, policy, title, outcome):
    async with started(runtime, permissions=policy) as s:
        record = await s.turn(1, f"permission {title}", timeout_s=10)
        assert record.reply == {"text": f"permission {title}: {outcome}", "stop_reason": "end_turn"}
        asked = [e["requestPermission"] for e in record.events if "requestPermission" in e]
        assert len(asked) == 1 and asked[0]["toolCall"]["title"] == title
        assert asked[0]["outcome"]["outcome"] == "selected"
        assert kinds(record) == ["tool_call", "requestPermission", "agent_message_chunk"]


def test_bad_permission_policy_is_refused(runtime):
    with pytest.raises(ValueError):
        agent(runtime, permissions="sometimes")
    with pytest.raises(ValueError):
        agent(runtime, permissions={"allow": ["x"], "deny": ["y"]})


# -- MCP ---------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def mcp_server(token: str):
    """A FastMCP-style server on loopback that refuses requests without the bearer token."""
    import uvicorn
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("bridge")

    @server.tool()
    def add(a: int, b: int) -> str:
        """Add two integers."""
        return str(a + b)

    app = server.streamable_http_app()
    seen_auth: list[str] = []

    async def guarded(scope, receive, send):
        if scope["type"] == "http":
            auth = dict(scope["headers"]).get(b"authorization", b"").decode()
            seen_auth.append(auth)
            if auth != f"Bearer {token}":
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b"no"})
                return
        await app(scope, receive, send)

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(guarded, log_level="warning", lifespan="on")
    web = uvicorn.Server(config)
    task = asyncio.create_task(web.serve(sockets=[sock]))
    while not web.started:
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/mcp", seen_auth
    finally:
        web.should_exit = True
        await task
        sock.close()


async def test_tool_call_through_the_offered_mcp_server(runtime):
    async with mcp_server("s3cret") as (url, seen_auth):
        bridge = http_mcp_server("bridge", url, bearer_token="s3cret")
        async with started(runtime, mcp_servers=[bridge]) as s:
            assert "mcp=['bridge']" in s.stderr_tail or await _eventually(
                lambda: "mcp=['bridge']" in s.stderr_tail
            )
            record = await s.turn(1, 'mcp add {"a": 2, "b": 40}', timeout_s=30)
            assert record.error is None, record.error
            assert record.reply == {"text": "bridge.add -> 42", "stop_reason": "end_turn"}
            assert seen_auth and set(seen_auth) == {"Bearer s3cret"}
            # Still the same live agent afterwards.
            assert (await s.turn(2, "after", timeout_s=10)).reply["text"].startswith(f"pid={s.pid}")


async def test_mcp_server_entries_may_be_dicts(runtime):
    entry = {"type": "http", "name": "b", "url": "http://127.0.0.1:1/mcp", "headers": []}
    s = agent(runtime, mcp_servers=[entry])
    assert s.mcp_servers[0].url == entry["url"]


async def test_agent_without_http_mcp_fails_start(runtime):
    s = agent(
        runtime, "no-http-mcp", mcp_servers=[http_mcp_server("bridge", "http://127.0.0.1:1/")]
    )
    with pytest.raises(HarnessStartFailed, match="does not support http MCP servers"):
        await s.start()
    assert_group_gone(s.pid)


async def _eventually(predicate, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate() and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    return predicate()


async def test_updates_between_turns_go_into_the_next_turn(runtime):
    async with started(runtime, "commands") as s:
        record = await s.turn(1, "hello", timeout_s=10)
        assert kinds(record)[:2] == ["available_commands_update", "agent_thought_chunk"]
        assert record.events[0]["availableCommands"][0]["name"] == "plan"
        assert record.reply["text"].endswith("seen=hello")


# -- failures ----------------------------------------------------------------------------


async def test_error_answer_is_harness_error_and_the_agent_stays_usable(runtime):
    async with started(runtime) as s:
        record = await s.turn(1, "error", timeout_s=10)
        assert record.error_type == "harness_error" and record.reply is None
        assert "scripted failure" in record.error and "-32603" in record.error
        assert s.alive
        assert (await s.turn(2, "fine", timeout_s=10)).reply["text"].endswith("seen=fine")


async def test_an_error_answer_the_env_takes_goes_on_with_the_same_agent():
    """An ACP error to a prompt fails that turn; an env with `step_error` goes on and
    the same agent process, its memory intact, answers the next prompt."""
    from episodes.session.live import LiveSession
    from episodes.types.spec import parse_spec
    from tests.support.envs import FORGIVING_SCRIPT

    spec = parse_spec(
        {
            "name": "acp-forgiven",
            "env": FORGIVING_SCRIPT,
            "tasks": [{"id": "t", "data": {"messages": ["hi", "error", "again"]}}],
            "harness": {
                "command": [sys.executable, AGENT, "ok"],
                "protocol": "acp",
                "ready_timeout_s": 15,
                "stop_timeout_s": 1,
                "runtime": {"type": "subprocess", "isolation": "none"},
            },
        }
    )
    session = LiveSession(spec, spec.tasks[0], 0, "s-acp-forgiven")
    try:
        await session.open()
        first = await session.turn(0)
        failed = await session.turn(1)
        assert failed.record.error_type == "harness_error" and failed.termination is None
        last = await session.turn(2)
        assert last.termination == "env_done" and last.record.message == "again"
        # The same process, which remembers turn 0 (the failed prompt added nothing).
        pid = first.record.reply["text"].split(";")[0]
        assert last.record.reply["text"].startswith(f"{pid};count=2;seen=hi|again")
    finally:
        await session.close()


async def test_crash_mid_turn_is_harness_crashed_with_stderr(runtime):
    async with started(runtime) as s:
        assert (await s.turn(1, "first", timeout_s=10)).error is None
        record = await s.turn(2, "crash", timeout_s=30)
        assert record.error_type == "harness_crashed", record.error
        assert "during turn 2" in record.error and "(exit code 7)" in record.error
        assert "crash: dying mid-turn" in record.error
        assert kinds(record) == ["agent_message_chunk"]  # what it said before dying is kept
        assert not s.alive and s.returncode == 7
        with pytest.raises(RuntimeError, match="unusable"):
            await s.turn(3, "more", timeout_s=1)


async def test_agent_killed_between_turns_is_a_crash(runtime):
    async with started(runtime) as s:
        assert (await s.turn(1, "one", timeout_s=10)).error is None
        os.kill(s.pid, signal.SIGKILL)
        record = await s.turn(2, "two", timeout_s=10)
        assert record.error_type == "harness_crashed", record.error
        assert "during turn 2, killed by SIGKILL (exit code -9)" in record.error


async def test_cancelled_turn_makes_the_session_unusable(runtime):
    async with started(runtime) as s:
        turning = asyncio.create_task(s.turn(1, "hang", timeout_s=60))
        await asyncio.sleep(0.3)
        turning.cancel()
        with pytest.raises(asyncio.CancelledError):
            await turning
        with pytest.raises(RuntimeError, match="interrupted"):
            await s.turn(2, "y", timeout_s=1)


async def test_hang_is_turn_timeout_after_session_cancel(runtime):
    async with started(runtime) as s:
        started_at = time.monotonic()
        record = await s.turn(1, "hang", timeout_s=1.0)
        assert time.monotonic() - started_at < 30  # the 1 s timeout acted: no hang
        assert record.error_type == "turn_timeout", record.error
        assert "within 1 s" in record.error
        assert f"saw session/cancel for {s.session_id}" in record.error  # the agent's stderr
        assert not s.alive


async def test_garbage_on_stdout_is_a_protocol_error(runtime):
    async with started(runtime) as s:
        record = await s.turn(1, "garbage", timeout_s=30)
        assert record.error_type == "protocol_error", record.error
        assert "not JSON on stdout: b'hello, I am not JSON'" in record.error
        assert not s.alive


@pytest.mark.parametrize("depth", [129, 5000])
async def test_a_message_nested_too_deep_is_a_protocol_error(runtime, depth):
    async with started(runtime) as s:
        record = await s.turn(1, f"deep {depth}", timeout_s=30)
        assert record.error_type == "protocol_error", record.error
        assert "deeper than 128 levels" in record.error
        assert not s.alive


async def test_never_initialize_fails_start_with_stderr(runtime):
    # The agent writes its stderr line as it starts: the bound must leave it time to
    # (a box start on a loaded machine takes a while), so it is not 1 s.
    s = agent(runtime, "never-init", ready_timeout_s=8.0)
    with pytest.raises(HarnessStartFailed, match="no 'initialize' within 8 s") as info:
        await s.start()
    assert "never-init: not reading anything" in info.value.stderr_tail
    assert not s.alive
    assert_group_gone(s.pid)


async def test_exit_before_initialize_carries_exit_code(runtime):
    s = agent(runtime, "exit-now")
    with pytest.raises(HarnessStartFailed, match="exited before it answered 'initialize'") as info:
        await s.start()
    assert info.value.exit_code == 3
    assert "cannot load the agent config" in str(info.value)
    assert_group_gone(s.pid)


async def test_not_an_agent_fails_start_with_a_protocol_error(runtime):
    argv = [
        sys.executable,
        "-c",
        "print('hi, I am no agent', flush=True); import time; time.sleep(60)",
    ]
    s = AcpDriver(runtime, argv, **FAST)
    with pytest.raises(HarnessStartFailed, match="protocol error before the session started"):
        await s.start()
    assert_group_gone(s.pid)


async def test_misuse_raises(runtime):
    s = agent(runtime)
    with pytest.raises(RuntimeError, match="before a successful start"):
        await s.turn(1, "x", timeout_s=1)
    async with started(runtime) as s:
        await s.turn(3, "x", timeout_s=10)
        with pytest.raises(RuntimeError, match="must increase"):
            await s.turn(3, "x", timeout_s=10)
        with pytest.raises(ValueError):
            await s.turn(4, float("nan"), timeout_s=10)
        assert (await s.turn(4, "ok", timeout_s=10)).error is None
    with pytest.raises(RuntimeError, match="stopped"):
        await s.turn(5, "x", timeout_s=1)


async def test_stop_mid_turn_ends_the_turn_and_the_process(runtime):
    s = agent(runtime)
    await s.start()
    turning = asyncio.create_task(s.turn(1, "hang", timeout_s=60))
    await asyncio.sleep(0.3)
    await s.stop()
    record = await turning
    assert record.error_type == "harness_crashed"
    await s.stop()  # idempotent
    assert_group_gone(s.pid)


async def test_stop_never_started(runtime):
    s = agent(runtime)
    await s.stop()
    await s.stop()
    assert not s.alive and s.pid is None
