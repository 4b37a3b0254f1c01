"""The viewer against the session's real dev server and worker: `viewer` serves it on a
free port in this process (its handlers share the event loop with the worker)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from episodes.viewer import serve

UI = "http://ui.example:8233"


class Viewer:
    def __init__(self, url: str) -> None:
        self.url = url
        self.http = httpx.AsyncClient(base_url=url, timeout=60)

    async def get(self, path: str, status: int = 200, **params: Any) -> Any:
        resp = await self.http.get(path, params=params)
        assert resp.status_code == status, (resp.status_code, resp.text[:500])
        return resp.json()

    async def lines(self, path: str, **params: Any) -> list[dict[str, Any]]:
        """An NDJSON stream, line by line as it arrives."""
        out = []
        async with self.http.stream("GET", path, params=params) as resp:
            assert resp.status_code == 200
            async for line in resp.aiter_lines():
                if line:
                    out.append(json.loads(line))
        return out


@pytest.fixture
async def viewer(client) -> AsyncIterator[Viewer]:  # type: ignore[no-untyped-def]
    async with serve(client, port=0, ui_address=UI) as running:
        v = Viewer(running.url)
        try:
            yield v
        finally:
            await v.http.aclose()
