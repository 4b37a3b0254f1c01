"""A kv-store MCP server for the LLM harness tests: streamable HTTP behind a bearer token.

    python tests/support/kv_mcp_server.py TOKEN      # prints its port, serves until killed

A stand-in for the session's MCP tool bridge (`put`, `get`, `list_keys`, `delete`
like the kv-store env): the harness test needs real MCP over HTTP, not the bridge.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys

import uvicorn
from mcp.server.mcpserver import MCPServer

TOKEN = sys.argv[1]
store: dict[str, str] = {}
server = MCPServer("kv")


@server.tool()
def put(key: str, value: str) -> str:
    """Store `value` under `key`."""
    store[key] = value
    return f"ok: {key}={value}"


@server.tool()
def get(key: str) -> str:
    """The value under `key`."""
    if key not in store:
        raise ValueError(f"no key {key!r}")
    return store[key]


@server.tool()
def list_keys() -> str:
    """All keys, as a JSON list."""
    return json.dumps(sorted(store))


@server.tool()
def delete(key: str) -> str:
    """Remove `key`."""
    store.pop(key, None)
    return f"deleted {key}"


app = server.streamable_http_app()


async def guarded(scope, receive, send):  # type: ignore[no-untyped-def]
    if scope["type"] == "http":
        headers = dict(scope["headers"])
        if headers.get(b"authorization") != f"Bearer {TOKEN}".encode():
            await send({"type": "http.response.start", "status": 401, "headers": []})
            await send({"type": "http.response.body", "body": b"bad token"})
            return
    await app(scope, receive, send)


def main() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    print(sock.getsockname()[1], flush=True)
    config = uvicorn.Config(guarded, log_level="warning", lifespan="on")
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    main()
