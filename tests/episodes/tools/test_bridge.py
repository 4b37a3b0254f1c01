"""ToolBridge against the official MCP client over real HTTP, a real Unix socket and
the real relay process. Nothing is mocked."""

from __future__ import annotations

import asyncio
import json
import socket
import stat
import sys
import threading
from pathlib import Path

import pytest
from fastmcp import FastMCP

from episodes.tools.bridge import ENV_TOKEN, ENV_URL, ToolBridge
from episodes.tunnel import relay as relay_module
from tests.support.mcp_client import mcp_client, raw_post

RELAY = Path(relay_module.__file__)


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def shout(text: str, times: int = 1) -> str:
    """Upper-case `text`, repeated `times` times."""
    await asyncio.sleep(0)
    return " ".join([text.upper()] * times)


class Counter:
    """Tools bound to an object: what a tool does is visible in the object."""

    def __init__(self) -> None:
        self.n = 0
        self.threads: set[int] = set()

    def bump(self) -> int:
        """Add one to the counter."""
        self.threads.add(threading.get_ident())
        self.n += 1
        return self.n

    def fail(self, why: str) -> str:
        """Always raises."""
        raise ValueError(f"refused: {why}")


@pytest.fixture
async def events():
    return []


async def test_lists_tools_with_schemas_and_calls_sync_and_async_tools(events):
    async with ToolBridge([add, shout], on_call=events.append) as bridge:
        assert bridge.url.startswith("http://127.0.0.1:") and bridge.url.endswith("/mcp")
        assert bridge.env() == {ENV_URL: bridge.url, ENV_TOKEN: bridge.token}
        async with mcp_client(bridge.url, bridge.token) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert set(tools) == {"add", "shout"}  # exactly those, nothing else
            assert tools["add"].description == "Add two integers."
            schema = tools["shout"].input_schema
            assert schema["properties"]["text"] == {"type": "string"}
            assert schema["properties"]["times"]["type"] == "integer"
            assert schema["required"] == ["text"]

            r = await client.call_tool("add", {"a": 2, "b": 40})
            assert not r.is_error and r.content[0].text == "42"
            r = await client.call_tool("shout", {"text": "hi", "times": 2})
            assert not r.is_error and r.content[0].text == "HI HI"

    assert [(e["kind"], e["name"], e["arguments"], e["result"]) for e in events] == [
        ("tool_call", "add", {"a": 2, "b": 40}, 42),
        ("tool_call", "shout", {"text": "hi", "times": 2}, "HI HI"),
    ]
    assert all(isinstance(e["ms"], float) and e["ms"] >= 0 and "error" not in e for e in events)
    json.dumps(events)  # they go into the transcript: JSON-able


async def test_tools_change_the_object_and_sync_tools_run_on_the_loop_thread(events):
    counter = Counter()
    async with (
        ToolBridge([counter.bump], on_call=events.append) as bridge,
        mcp_client(bridge.url, bridge.token) as client,
    ):
        for _ in range(3):
            await client.call_tool("bump", {})
    assert counter.n == 3
    # On the loop, like env.step/score: they never race the env's state from a thread.
    assert counter.threads == {threading.get_ident()}
    assert [e["result"] for e in events] == [1, 2, 3]


async def test_a_tool_that_raises_is_an_error_result_and_the_next_call_works(events):
    counter = Counter()
    async with (
        ToolBridge([counter.fail, counter.bump], on_call=events.append) as bridge,
        mcp_client(bridge.url, bridge.token) as client,
    ):
        r = await client.call_tool("fail", {"why": "nope"})
        assert r.is_error and "refused: nope" in r.content[0].text
        r = await client.call_tool("bump", {})
        assert not r.is_error and r.content[0].text == "1"
    failed, ok = events
    assert failed["name"] == "fail" and "refused: nope" in failed["error"]
    assert "result" not in failed and failed["ms"] >= 0
    assert ok["result"] == 1


async def test_a_fastmcp_server_is_served_without_being_changed(events):
    server = FastMCP("env-server")

    @server.tool
    def greet(name: str) -> dict:
        """Greet someone."""
        return {"greeting": f"hello {name}"}

    other_events: list = []
    middleware_before = list(server.middleware)
    # Two sessions serving one env-level server: each hears only its own calls.
    async with (
        ToolBridge(server, on_call=events.append) as a,
        ToolBridge(server, on_call=other_events.append) as b,
        mcp_client(a.url, a.token) as client,
    ):
        tools = (await client.list_tools()).tools
        assert [t.name for t in tools] == ["greet"]
        assert tools[0].description == "Greet someone."
        r = await client.call_tool("greet", {"name": "ada"})
        assert r.structured_content == {"greeting": "hello ada"}
        assert b.port != a.port
    assert list(server.middleware) == middleware_before
    assert [(e["name"], e["result"]) for e in events] == [("greet", {"greeting": "hello ada"})]
    assert other_events == []


async def test_no_token_and_another_sessions_token_get_401_and_reach_no_tool(events):
    counter = Counter()
    async with (
        ToolBridge([counter.bump], on_call=events.append) as mine,
        ToolBridge([add]) as theirs,
    ):
        assert mine.token != theirs.token
        for token in (None, theirs.token, mine.token[:-1], mine.token + "x"):
            response = await raw_post(mine.url, token)
            assert response.status_code == 401, token
            assert response.headers["www-authenticate"].startswith("Bearer")
        # A real client with the wrong token cannot open a session at all.
        with pytest.raises(Exception):  # noqa: B017 - the SDK's error type is not the point
            async with mcp_client(mine.url, theirs.token) as client:
                await client.call_tool("bump", {})
        # The right token works, on the same bridge, right after.
        assert (await raw_post(mine.url, mine.token)).status_code == 200
    assert counter.n == 0 and events == []


async def test_stop_refuses_connections_is_idempotent_and_survives_cancellation():
    bridge = ToolBridge([add], unix_socket=True)
    await bridge.start()
    port, path, directory = bridge.port, bridge.socket_path, bridge.socket_dir
    assert path is not None and path.is_socket()
    stopping = asyncio.create_task(bridge.stop())
    await asyncio.sleep(0)
    stopping.cancel()  # a cancelled caller does not leave a half-stopped bridge
    await bridge.stop()
    await bridge.stop()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    assert not path.exists() and directory is not None and not directory.exists()


async def test_stop_with_a_harness_still_connected_is_prompt():
    bridge = ToolBridge([add])
    await bridge.start()
    loop = asyncio.get_running_loop()
    stop_s, later_call_answered = None, False
    try:
        async with mcp_client(bridge.url, bridge.token) as client:
            await client.call_tool("add", {"a": 1, "b": 1})
            t0 = loop.time()
            await bridge.stop()
            stop_s = loop.time() - t0
            # The SDK tears the whole client down when its server goes away.
            r = await asyncio.wait_for(client.call_tool("add", {"a": 1, "b": 1}), 10)
            later_call_answered = not r.is_error
    except Exception:  # the call, or closing a session whose server is gone, fails
        pass
    assert stop_s is not None and stop_s < 5
    assert not later_call_answered
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", bridge.port), timeout=2).close()


async def test_unix_socket_is_private(tmp_path):
    async with ToolBridge([add], unix_socket=True) as bridge:
        assert bridge.socket_dir is not None and bridge.socket_path is not None
        assert stat.S_IMODE(bridge.socket_dir.stat().st_mode) == 0o700
        assert stat.S_IMODE(bridge.socket_path.stat().st_mode) == 0o600
    # A directory others may enter is refused: the socket would be theirs to call.
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    with pytest.raises(PermissionError, match="must be private"):
        await ToolBridge([add], unix_socket=shared / "mcp.sock").start()


async def _start_relay(socket_path: Path) -> tuple[asyncio.subprocess.Process, int]:
    # -I: isolated mode, no site-packages and no PYTHONPATH, as in a bare box.
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-I",
        str(RELAY),
        "--socket",
        str(socket_path),
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    ready = json.loads(await asyncio.wait_for(proc.stdout.readline(), 10))
    assert ready["type"] == "ready" and ready["host"] == "127.0.0.1"
    return proc, ready["port"]


async def test_through_the_relay_a_client_lists_and_calls_tools(tmp_path, events):
    directory = tmp_path / "box-mcp"
    directory.mkdir(mode=0o700)
    counter = Counter()
    async with ToolBridge(
        [add, counter.bump], on_call=events.append, unix_socket=directory / "mcp.sock"
    ) as bridge:
        proc, port = await _start_relay(directory / "mcp.sock")
        try:
            in_box = f"http://127.0.0.1:{port}/mcp"
            env = bridge.env(url=in_box)
            assert env == {ENV_URL: in_box, ENV_TOKEN: bridge.token}
            async with mcp_client(env[ENV_URL], env[ENV_TOKEN]) as client:
                assert {t.name for t in (await client.list_tools()).tools} == {"add", "bump"}
                r = await client.call_tool("add", {"a": 20, "b": 22})
                assert r.content[0].text == "42"
                await client.call_tool("bump", {})
            # The relay forwards bytes only: the token is still checked behind it.
            assert (await raw_post(in_box, None)).status_code == 401
            assert (await raw_post(in_box, "other")).status_code == 401
        finally:
            proc.terminate()
            assert await asyncio.wait_for(proc.wait(), 10) == 0
    assert counter.n == 1
    assert [e["name"] for e in events] == ["add", "bump"]


async def test_the_relay_outlives_a_bridge_and_serves_the_next_one(tmp_path):
    # A pooled box keeps its relay; the next session's bridge binds the same path.
    directory = tmp_path / "box-mcp"
    directory.mkdir(mode=0o700)
    path = directory / "mcp.sock"
    proc = None
    try:
        async with ToolBridge([add], unix_socket=path) as first:
            proc, port = await _start_relay(path)
            url = f"http://127.0.0.1:{port}/mcp"
            async with mcp_client(url, first.token) as client:
                await client.call_tool("add", {"a": 1, "b": 2})
        async with ToolBridge([shout], unix_socket=path) as second:
            assert (await raw_post(url, first.token)).status_code == 401
            async with mcp_client(url, second.token) as client:
                assert [t.name for t in (await client.list_tools()).tools] == ["shout"]
    finally:
        if proc is not None:
            proc.terminate()
            await proc.wait()


def keep(value: list) -> int:
    """Take any list."""
    return 1


async def test_arguments_nested_too_deep_are_refused_and_not_recorded(events):
    """200 levels parse (the MCP server's limit is higher) but fail Temporal's converter
    later, in the workflow, when the turn holding the call is decoded (issue 19)."""
    from episodes.json_depth import value_too_deep

    deep: list = []
    inner = deep
    for _ in range(199):
        inner.append([])
        inner = inner[0]
    async with ToolBridge([keep], on_call=events.append) as bridge:
        async with mcp_client(bridge.url, bridge.token) as client:
            refused = await client.call_tool("keep", {"value": deep})
            fine = await client.call_tool("keep", {"value": [[1]]})
    assert refused.is_error and "deeper than 128 levels" in refused.content[0].text
    assert not fine.is_error
    assert [e.get("error") is not None for e in events] == [True, False]
    assert not value_too_deep(events, 16)  # the refused arguments are not kept
