"""The harness's side in tests: the official MCP client SDK over streamable HTTP."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


@contextlib.asynccontextmanager
async def mcp_client(url: str, token: str | None) -> AsyncIterator[Client]:
    """A connected MCP client sending `Authorization: Bearer <token>` (none if None)."""
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=10) as http,
        Client(streamable_http_client(url, http_client=http), cache=None) as client,
    ):
        yield client


async def raw_post(url: str, token: str | None) -> httpx2.Response:
    """An MCP initialize request, to see the bridge's HTTP answer itself."""
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
    }
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"},
        },
    }
    async with httpx2.AsyncClient(timeout=10) as http:
        return await http.post(url, json=body, headers=headers)
