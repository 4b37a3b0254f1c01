"""`episodes dev` killed with SIGKILL takes its Temporal dev server with it.

Tried as a new user would: an orphaned `temporal server start-dev` kept the port and
the SQLite file, and the next `episodes dev` on that port silently reused it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from episodes.client.devserver import free_port, port_open

pytestmark = pytest.mark.slow


def _servers_on(port: int) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if "start-dev" in cmd and str(port) in cmd:
            found.append(proc)
    return found


def test_sigkilled_dev_leaves_no_server(tmp_path):
    port, ui_port = free_port(), free_port()
    owner = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "episodes.cli.main",
            "dev",
            "--port",
            str(port),
            "--ui-port",
            str(ui_port),
        ],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    try:
        deadline = time.monotonic() + 60
        while not port_open("127.0.0.1", port):
            assert owner.poll() is None, "episodes dev exited before its server listened"
            assert time.monotonic() < deadline, "the dev server never listened"
            time.sleep(0.2)
        servers = _servers_on(port)
        assert servers, "no `temporal server start-dev` process found for the port"
        owner.send_signal(signal.SIGKILL)
        owner.wait(10)
        _, alive = psutil.wait_procs(servers, timeout=20)
        assert not alive, f"dev server outlived its SIGKILLed owner: {[p.pid for p in alive]}"
        assert not port_open("127.0.0.1", port)
    finally:
        if owner.poll() is None:
            owner.kill()
        for proc in _servers_on(port):
            proc.kill()
