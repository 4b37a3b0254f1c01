"""`episodes view` as a user runs it: a process that prints its address and serves."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys

import httpx

from tests.conftest import ROOT


async def test_episodes_view_prints_its_address_and_serves(dev_server) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "episodes.cli.main",
        "view",
        "--port",
        "0",
        "--address",
        dev_server.address,
        "--ui-address",
        "http://ui.test:1",
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "COLUMNS": "200"},
    )
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
        m = re.search(r"episodes viewer: (http://127\.0\.0\.1:\d+)", line)
        assert m, line
        async with httpx.AsyncClient(base_url=m.group(1), timeout=30) as http:
            page = await http.get("/")
            assert page.status_code == 200 and "/static/index.js" in page.text
            assert (await http.get("/static/viewer.css")).status_code == 200
            assert (await http.get("/static/../app.py")).status_code == 404
            cfg = (await http.get("/api/config")).json()
            assert cfg == {"ui_address": "http://ui.test:1", "namespace": "default"}
            assert "batches" in (await http.get("/api/batches")).json()
    finally:
        proc.send_signal(signal.SIGINT)
        await asyncio.wait_for(proc.wait(), 30)
    assert proc.returncode == 0, (await proc.stderr.read()).decode() if proc.stderr else ""
