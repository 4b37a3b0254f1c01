"""Real worker processes, episodes by the batch, and checks that trust nothing of ours.

Leftovers are found by what the OS and the engine say: processes by a unique tag in
their command line (psutil), containers by their `episodes.worker` label.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from temporalio.api.enums.v1 import EventType, TimeoutType
from temporalio.client import Client, WorkflowExecutionStatus

from episodes import contract
from episodes.client import EpisodesClient
from episodes.types.results import EpisodeResult
from episodes.types.runtime import DockerConfig
from episodes.types.spec import EpisodeSpec, parse_spec
from tests.conftest import ROOT
from tests.support.helpers import wait_until

HARNESS = ROOT / "tests" / "support" / "harnesses" / "chaos_harness.py"
# A trusted process group instead of the sandbox: for harnesses that log their turns
# into the test's folder (a sandbox may not write the worker's files).
TRUSTED = {"runtime": {"type": "subprocess", "isolation": "none"}}


def docker_api() -> tuple[Any, str | None]:
    """(the engine's low-level API, None), or (None, why not). Unlike the runtime tests'
    backend check, never rebuilds the shared image: the chaos harness is bind-mounted."""
    try:
        import docker
    except ImportError:
        return None, "the docker SDK is not installed (pip install 'episodes[docker]')"
    try:
        client = docker.from_env(timeout=30)
        client.ping()
    except docker.errors.DockerException:
        return None, "no Docker engine answers (run scripts/start-docker.sh as root)"
    try:
        client.images.get(DockerConfig().image)
    except docker.errors.ImageNotFound:
        return None, f"image {DockerConfig().image} is missing (scripts/build-image.sh)"
    return client.api, None


def containers_of(api: Any, worker_id: str) -> list[str]:
    found = api.containers(all=True, filters={"label": f"episodes.worker={worker_id}"})
    return [c["Names"][0] for c in found]


def new_tag() -> str:
    return f"chaos-{uuid.uuid4().hex[:10]}"


def tagged_processes(tag: str) -> list[int]:
    """Running (non-zombie) processes whose command line holds `tag`."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        with contextlib.suppress(psutil.Error):
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if any(tag in part for part in proc.info["cmdline"] or []):
                found.append(proc.pid)
    return found


def script_spec(
    name: str,
    tasks: dict[str, list[str]],
    command: list[str],
    **over: Any,
) -> EpisodeSpec:
    """The `script` env over `tasks` (id -> messages), expecting every message echoed."""
    data: dict[str, Any] = {
        "name": name,
        "env": "script",
        "tasks": [{"id": t, "data": {"messages": m, "expected": m}} for t, m in tasks.items()],
        "harness": {"command": command, "ready_timeout_s": 60, "stop_timeout_s": 1},
        "max_turns": 50,
        "turn_timeout_s": 30,
        "worker_lost_timeout_s": 3,
    }
    harness = over.pop("harness", {})
    data.update(over)
    data["harness"].update(harness)
    return parse_spec(data)


def turns(task: str, n: int) -> list[str]:
    return [f"{task}:{i}" for i in range(n)]


@dataclass
class WorkerProc:
    """`episodes worker` as a real process in its own session (signals reach only it)."""

    address: str
    queue: str
    log: Path
    max_sessions: int = 256
    drain_timeout_s: float = 30.0
    proc: subprocess.Popen[bytes] | None = None
    worker_id: str = ""
    harnesses: set[int] = field(default_factory=set)

    def start(self) -> WorkerProc:
        out = open(self.log, "ab")  # the child holds it
        argv = [sys.executable, "-m", "episodes.cli.main", "worker", "--address", self.address]
        argv += ["--task-queue", self.queue, "--max-sessions", str(self.max_sessions)]
        argv += ["--drain-timeout-s", str(self.drain_timeout_s)]
        self.proc = subprocess.Popen(
            argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        out.close()
        return self

    async def ready(self, timeout_s: float = 60.0) -> WorkerProc:
        """Wait for its start line (printed once it polls) and read its worker id."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc is not None and self.proc.poll() is None, self.text()
            found = re.search(r"^worker (\S+): ", self.text(), re.MULTILINE)
            if found:
                self.worker_id = found.group(1)
                return self
            await asyncio.sleep(0.1)
        raise AssertionError(f"worker did not start: {self.text()}")

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def children(self) -> list[int]:
        """Its descendants now; also remembered, to check later that all are gone."""
        try:
            kids = [p.pid for p in psutil.Process(self.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            return []
        self.harnesses.update(kids)
        return kids

    def signal(self, sig: int) -> None:
        os.kill(self.pid, sig)

    def wait(self, timeout_s: float = 60.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout_s)

    def kill(self) -> None:
        """Cleanup: SIGKILL it if it still runs (only ever this process)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


async def start_all(
    client: Client, queue: str, spec: EpisodeSpec, *, batch: str | None = None
) -> list[str]:
    ec = EpisodesClient(client, task_queue=queue)
    handles = [await ec.start_episode(spec, t, batch_id=batch) for t in spec.load_tasks()]
    return [h.id for h in handles]


def episode_id(spec: EpisodeSpec, task: str) -> str:
    return contract.episode_id(spec.name, task, 0)


async def wait_closed(client: Client, ids: list[str], timeout_s: float) -> dict[str, float]:
    """Poll until every workflow is closed (surviving a server outage); id -> close time
    (time.time(), from the server's close_time)."""
    closed: dict[str, float] = {}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and len(closed) < len(ids):
        for wid in ids:
            if wid in closed:
                continue
            try:
                desc = await client.get_workflow_handle(wid).describe()
            except Exception:
                continue  # the server may be down or restarting
            if desc.status != WorkflowExecutionStatus.RUNNING and desc.close_time:
                closed[wid] = desc.close_time.timestamp()
        if len(closed) < len(ids):
            await asyncio.sleep(0.25)
    return closed


async def results(client: Client, ids: list[str]) -> dict[str, EpisodeResult]:
    out = {}
    for wid in ids:
        out[wid] = await client.get_workflow_handle(wid, result_type=EpisodeResult).result()
    return out


async def provisions(client: Client, wid: str) -> list[tuple[str, int, float]]:
    """(identity, attempt, start time) of every provision the history shows as started."""
    scheduled: dict[int, str] = {}
    found = []
    async for ev in client.get_workflow_handle(wid).fetch_history_events():
        if ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = ev.activity_task_scheduled_event_attributes
            scheduled[ev.event_id] = attrs.activity_type.name
        elif ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attrs = ev.activity_task_started_event_attributes
            if scheduled.get(attrs.scheduled_event_id) == contract.PROVISION:
                found.append((attrs.identity, attrs.attempt, ev.event_time.ToMicroseconds() / 1e6))
    return found


async def lost_timeouts(client: Client, wid: str) -> int:
    """How many of the episode's activities timed out as a lost worker's do: a missed
    heartbeat, or no worker taking the session queue's task (both bounded by
    `worker_lost_timeout_s`: the loss is found within about twice that)."""
    n = 0
    async for ev in client.get_workflow_handle(wid).fetch_history_events():
        if ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT:
            info = ev.activity_task_timed_out_event_attributes.failure.timeout_failure_info
            n += info.timeout_type in (
                TimeoutType.TIMEOUT_TYPE_HEARTBEAT,
                TimeoutType.TIMEOUT_TYPE_SCHEDULE_TO_START,
            )
    return n


async def assert_killed_and_survivor_leave_nothing(
    killed: WorkerProc, survivor: WorkerProc, tag: str
) -> None:
    """After one worker was SIGKILLed: its harnesses died with it (PR_SET_PDEATHSIG),
    the survivor drains and exits 0 on SIGTERM, and no `tag`ged process is left."""
    gone = await wait_until(lambda: not (set(tagged_processes(tag)) & killed.harnesses), timeout=10)
    assert gone, f"harnesses of the killed worker outlived it: {tagged_processes(tag)}"
    survivor.signal(signal.SIGTERM)
    assert survivor.wait(60) == 0, survivor.text()
    assert not tagged_processes(tag)


def sigterm_all(workers: list[WorkerProc]) -> None:
    for w in workers:
        if w.proc is not None and w.proc.poll() is None:
            w.signal(signal.SIGTERM)
