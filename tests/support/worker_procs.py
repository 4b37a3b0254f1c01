"""Real `episodes` processes for the production tests: workers, doctor, scrapes."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from activities.telemetry import free_port
from tests.conftest import ROOT


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "EPISODES_"))}
    env.update(extra)
    return env


async def episodes(*args: str, timeout: float = 120, **env: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "episodes.cli.main",
        *args,
        cwd=ROOT,
        env=cli_env(**env),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    return proc.returncode or 0, out.decode(), err.decode()


class WorkerProc:
    """`episodes worker` as a subprocess with its own metrics port and JSON logs."""

    def __init__(self, address: str, task_queue: str, log: Path, *args: str, **env: str):
        self.metrics_port = free_port()
        self.log = log
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "episodes.cli.main",
                "worker",
                "--address",
                address,
                "--task-queue",
                task_queue,
                "--metrics-port",
                str(self.metrics_port),
                "--log-format",
                "json",
                *args,
            ],
            cwd=ROOT,
            env=cli_env(**env),
            stdout=subprocess.PIPE,
            stderr=log.open("wb"),
            text=True,
        )
        # The first stdout line names the worker: "worker <id>: ...".
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        assert line.startswith("worker "), f"worker did not start: {line!r} {log.read_text()}"
        self.worker_id = line.split()[1].rstrip(":")

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        return scrape(self.metrics_port)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the endpoint: (name, sorted labels) -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples: dict, name: str, **labels: str) -> float:
    """The sum of a series' samples whose labels include `labels`."""
    return sum(v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= set(ls))


def wait_for(pred, timeout: float = 30.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.1)
    return False
