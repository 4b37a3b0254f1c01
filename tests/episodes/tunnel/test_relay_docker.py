"""The relay in a real `network: none` container, wired the way the docker runtime
will wire it: the bridge's private socket directory and relay.py bind-mounted in."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import uuid

import pytest

from episodes.tools.bridge import ToolBridge
from episodes.tunnel import relay

IMAGE = "episodes-harness:latest"

# An in-box MCP initialize with and without the token: stdlib only, like the box.
CLIENT = r"""
import json, sys, urllib.error, urllib.request
url, token = sys.argv[1], sys.argv[2]
body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "box", "version": "0"}}}).encode()
for tok in (token, None):
    h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if tok:
        h["Authorization"] = "Bearer " + tok
    try:
        print(urllib.request.urlopen(urllib.request.Request(url, body, h), timeout=10).status)
    except urllib.error.HTTPError as e:
        print(e.code)
"""


def _skip_reason() -> str | None:
    if shutil.which("docker") is None:
        return "no docker CLI"
    try:
        subprocess.run(["docker", "image", "inspect", IMAGE], check=True, capture_output=True)
    except subprocess.CalledProcessError:
        return f"no Docker engine answers, or no {IMAGE} (scripts/build-image.sh)"
    return None


async def _exec(name: str, *argv: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        "docker",
        "exec",
        name,
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode(), err.decode()


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


pytestmark = [pytest.mark.docker, pytest.mark.skipif(bool(_skip_reason()), reason="docker")]


async def test_a_network_less_container_reaches_the_bridge_through_the_relay():
    name = f"episodes-bridge-test-{uuid.uuid4().hex[:8]}"
    async with ToolBridge([add], unix_socket=True) as bridge:
        assert bridge.socket_dir is not None
        run = [
            *["docker", "run", "-d", "--name", name, "--network", "none", "--cap-drop", "ALL"],
            *["--security-opt", "no-new-privileges"],
            *["--mount", f"type=bind,source={bridge.socket_dir},target=/run/episodes-mcp"],
            *["--mount", f"type=bind,source={relay.__file__},target=/opt/relay.py,readonly"],
            *[IMAGE, "sleep", "infinity"],
        ]
        subprocess.run(
            run,
            check=True,
            capture_output=True,
        )
        proc = None
        try:
            proc = await asyncio.create_subprocess_exec(
                *["docker", "exec", "-i", name, "python3", "/opt/relay.py"],
                *["--socket", "/run/episodes-mcp/mcp.sock"],
                stdout=asyncio.subprocess.PIPE,
            )
            assert proc.stdout is not None
            ready = json.loads(await asyncio.wait_for(proc.stdout.readline(), 30))
            url = f"http://127.0.0.1:{ready['port']}/mcp"
            # Not subprocess.run: the bridge serves on this test's event loop.
            code, out, err = await _exec(name, "python3", "-c", CLIENT, url, bridge.token)
            assert out.split() == ["200", "401"], err  # reachable; the token still required
            # The bridge's own TCP port is on the worker's loopback, another
            # network namespace: from the box it is refused.
            direct = f"http://127.0.0.1:{bridge.port}/mcp"
            code, _, err = await _exec(name, "python3", "-c", CLIENT, direct, bridge.token)
            assert code != 0 and "Connection refused" in err
        finally:
            if proc is not None and proc.returncode is None:
                proc.terminate()
                await proc.wait()
            subprocess.run(["docker", "rm", "-f", name], capture_output=True)
