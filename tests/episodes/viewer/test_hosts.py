"""The viewer answers only to its own host names: a page of another site that points
its name at the user's loopback (DNS rebinding) gets 403, not transcripts."""

from __future__ import annotations

import socket

import httpx
import pytest

from episodes.viewer import serve

EVIL = ["evil.example", "localhost.evil.example", "127.0.0.1.nip.io", "attacker.test."]


async def _status(port: int, host: str, path: str) -> int:
    async with httpx.AsyncClient(timeout=60) as http:
        resp = await http.get(f"http://127.0.0.1:{port}{path}", headers={"Host": host})
        if resp.status_code == 403:
            assert len(resp.text.strip().splitlines()) == 1, resp.text
        return resp.status_code


@pytest.mark.parametrize("path", ["/", "/api/config"])
async def test_bound_to_loopback_it_answers_only_loopback_names(client, path) -> None:
    async with serve(client, host="127.0.0.1", port=0) as running:
        p = running.port
        for good in (f"127.0.0.1:{p}", f"localhost:{p}", "localhost", f"[::1]:{p}", "LocalHost"):
            assert await _status(p, good, path) == 200, good
        for bad in EVIL + [f"{e}:{p}" for e in EVIL] + ["10.0.0.8", "[fe80::1]:80"]:
            assert await _status(p, bad, path) == 403, bad


async def test_bound_to_every_address_it_answers_addresses_and_its_own_names(client) -> None:
    async with serve(client, host="0.0.0.0", port=0) as running:
        p = running.port
        for good in ("10.0.0.8", f"192.168.1.4:{p}", "localhost", socket.gethostname()):
            assert await _status(p, good, "/api/config") == 200, good
        for bad in EVIL:
            assert await _status(p, bad, "/api/config") == 403, bad
