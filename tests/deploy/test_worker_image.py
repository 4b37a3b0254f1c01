"""The shipped worker bounds its boxes (issue 40 §1): the worker image, built from the
Dockerfile from a local base (scripts/build-worker-image.sh: no registry), run as
docker-compose.yml runs its `worker` service (its user, capabilities, security options
and init, read from the file) against a dev server on this host. Hogs beside healthy
episodes: memory, shared anonymous memory, /dev/shm, disk, a fork bomb and open files.
Each hog ends `limit_exceeded` naming its limit, the neighbours finish, the worker runs
as uid 10001 with no capabilities in cgroup mode, and the container's memory (worker
and every box) stays within the boxes' limits.

Docker only: with EPISODES_REQUIRE naming docker (CI, once its engine is up) a missing
engine or a failed build fails the test instead of skipping it.
"""

from __future__ import annotations

import fcntl
import os
import re
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.test_files import ROOT, services
from tests.support.chaos.helpers import HARNESS, results, script_spec, start_all, turns, wait_closed
from tests.support.helpers import wait_until
from tests.workers.test_hostile import MOUNT

pytestmark = [pytest.mark.docker, pytest.mark.chaos, pytest.mark.slow, pytest.mark.timeout(1800)]

IMAGE = os.environ.get("EPISODES_WORKER_IMAGE", "episodes-worker:test")
BUILD = ROOT / "scripts" / "build-worker-image.sh"
SMALL = {"memory": "64m", "processes": 32, "disk": "16m"}
MIB = 2**20
# A safety net for the machine running the test, far above what the boxes may hold:
# an unbounded hog must fail the test's memory check, not take the host down.
SAFETY_NET = "3g"
HOGS = {
    # name: (chaos_harness mode and options, the limit its error names)
    "memory": (["hog"], "memory"),
    "shared-mmap": (["shared-mmap"], "memory"),
    "dev-shm": (["fill", "path=/dev/shm"], "disk"),
    "disk": (["fill"], "disk"),
    "fork": (["fork-bomb"], "process"),
    "open-files": (["open-files"], "open-files"),
}


def _skip_or_fail(why: str) -> None:
    required = {s.strip() for s in os.environ.get("EPISODES_REQUIRE", "").split(",")}
    if "docker" in required:
        pytest.fail(f"docker is required (EPISODES_REQUIRE) but: {why}")
    pytest.skip(why)


def _docker(*args: str, timeout: float = 120, check: bool = True) -> str:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)}: {done.stdout}{done.stderr}")
    return done.stdout


@pytest.fixture(scope="module")
def worker_image() -> str:
    """The image, built unless its content hash is current (CI builds it before the
    tests: .ci/run)."""
    try:
        subprocess.run(["docker", "info"], capture_output=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        _skip_or_fail("no Docker engine answers (scripts/start-docker.sh)")
    # One build at a time on this machine (pytest-xdist workers each get here).
    with open(Path(tempfile.gettempdir()) / "episodes-worker-image.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        built = subprocess.run(
            ["bash", str(BUILD)],
            capture_output=True,
            text=True,
            timeout=1500,
            env={**os.environ, "EPISODES_WORKER_IMAGE": IMAGE},
        )
    if built.returncode != 0:
        _skip_or_fail(f"building {IMAGE} failed: {built.stderr[-2000:]}")
    return IMAGE


def compose_flags(*, delegate: bool = True) -> list[str]:
    """`docker run` flags for what docker-compose.yml sets on the worker service;
    without `delegate`, not its root start and CAP_SYS_ADMIN (the image's own user)."""
    worker = services()["worker"]
    flags = ["--user", str(worker["user"])] if "user" in worker and delegate else []
    flags += [f"--cap-add={c}" for c in worker.get("cap_add", [])] if delegate else []
    flags += [f"--security-opt={o}" for o in worker.get("security_opt", [])]
    flags += ["--init"] if worker.get("init") else []
    return flags


def _spec(kind: str, command: list[str]) -> Any:
    harness = {"runtime": {"type": "subprocess", "limits": SMALL, "ro_paths": [MOUNT]}}
    # A generous turn timeout: each hog must be ended by its limit, never by the clock.
    return script_spec(
        f"{kind}-{uuid.uuid4().hex[:6]}",
        {kind: turns(kind, 4)},
        command,
        harness=harness,
        turn_timeout_s=120,
    )


def _memory_peak(container_id: str) -> int | None:
    """The container's memory cgroup's peak usage (worker and boxes, tmpfs included)."""
    candidates = [
        f"/sys/fs/cgroup/memory/docker/{container_id}/memory.max_usage_in_bytes",
        f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope/memory.peak",
        f"/sys/fs/cgroup/docker/{container_id}/memory.peak",
    ]
    for path in candidates:
        try:
            return int(Path(path).read_text())
        except (OSError, ValueError):
            continue
    return None


def _proc_status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: v.strip() for k, _, v in (line.partition(":") for line in lines)}


@pytest.mark.parametrize("how", ["compose", "image-user"])
async def test_the_compose_worker_ends_every_hog_at_its_limit(
    worker_image, chaos_server, chaos_client, how
):
    """`compose`: as docker-compose.yml runs it (cgroup mode, delegated). `image-user`:
    the same but started as the image's USER 10001, no CAP_SYS_ADMIN (rlimits mode, as
    a worker run without the compose file's settings): bounded too, by other means."""
    cgroups = how == "compose"
    name = f"episodes-image-test-{uuid.uuid4().hex[:8]}"
    queue = f"image-{uuid.uuid4().hex[:6]}"
    argv = ["run", "-d", "--name", name, "--network", "host", *compose_flags(delegate=cgroups)]
    argv += ["--memory", SAFETY_NET, "-v", f"{HARNESS.parent}:{MOUNT}:ro"]
    argv += [worker_image, "--address", chaos_server.address, "--namespace", "default"]
    argv += ["--task-queue", queue, "--max-sessions", "16"]
    container = _docker(*argv).strip()
    try:

        def logs_now() -> str:
            done = subprocess.run(["docker", "logs", name], capture_output=True, text=True)
            return done.stdout + done.stderr

        assert await wait_until(lambda: "sandbox: " in logs_now(), timeout=180), logs_now()
        logs = logs_now()
        mode = re.search(r"^sandbox: (.*)$", logs, re.MULTILINE)
        assert mode is not None, logs
        print(f"\n  {mode.group(1)}")
        # As compose runs it, the image delegates: the kernel bounds each box.
        if cgroups:  # as compose runs it, the image delegates: the kernel bounds each box
            assert mode.group(1).startswith("cgroup mode"), logs
            assert "delegated by the image's entrypoint" in mode.group(1), logs
        else:
            assert mode.group(1).startswith("rlimits mode: "), logs

        # The worker: uid 10001, no capability left, not even in its bounding set.
        init = int(_docker("inspect", "-f", "{{.State.Pid}}", name).strip())
        worker_pid = int(Path(f"/proc/{init}/task/{init}/children").read_text().split()[0])
        status = _proc_status(worker_pid)
        assert status["Uid"].split() == ["10001"] * 4, status["Uid"]
        assert status["Gid"].split() == ["10001"] * 4, status["Gid"]
        assert int(status["CapEff"], 16) == 0, status
        if cgroups:  # dropped by the entrypoint: none to regain either
            assert int(status["CapBnd"], 16) == 0 and status["NoNewPrivs"] == "1", status
        baseline = _memory_peak(container)

        tag = f"image-{uuid.uuid4().hex[:8]}"
        in_box = ["{python}", f"{MOUNT}/{HARNESS.name}"]
        specs = {
            kind: _spec(kind.replace("-", ""), [*in_box, *mode_args, f"tag={tag}"])
            for kind, (mode_args, _) in HOGS.items()
        }
        for i in (1, 2):
            specs[f"healthy-{i}"] = _spec(f"healthy{i}", [*in_box, "log", "delay=0.2"])
        ids: dict[str, str] = {}
        started_at = time.monotonic()
        for kind, spec in specs.items():
            [ids[kind]] = await start_all(chaos_client, queue, spec)
        closed = await wait_closed(chaos_client, list(ids.values()), timeout_s=600)
        assert len(closed) == len(ids), f"stuck: {set(ids.values()) - set(closed)}\n{logs_now()}"
        by_id = await results(chaos_client, list(ids.values()))
        out = {kind: by_id[wid] for kind, wid in ids.items()}
        took = time.monotonic() - started_at
        for kind, r in out.items():
            print(
                f"  {kind}: {r.termination} after {r.duration_s:.1f} s; {(r.error or '')[:110]!r}"
            )

        for kind, (_, limit) in HOGS.items():
            r = out[kind]
            if kind == "memory" and not cgroups:
                # RLIMIT_DATA refuses the private allocation: the harness fails of it.
                assert r.termination in ("harness_error", "harness_crashed"), r
                assert "MemoryError" in (r.error or ""), r
                continue
            assert r.termination == "limit_exceeded", (kind, r)
            assert f"its {limit} limit" in (r.error or ""), (kind, r)
            assert r.turns == 2, (kind, r)  # turn 1 ended by the limit, not later
        for i in (1, 2):
            r = out[f"healthy-{i}"]
            assert r.termination == "env_done" and r.reward == 1.0, r

        # Worker and boxes together: within what the boxes may hold (each its memory,
        # its tmpfs counted in it) over the worker's own, not what the hogs asked for.
        peak = _memory_peak(container)
        assert peak is not None and baseline is not None, "no memory cgroup for the container"
        allowed = baseline + len(specs) * 64 * MIB + 256 * MIB
        print(
            f"  container memory: {baseline / MIB:.0f} MiB at start, peak {peak / MIB:.0f} MiB "
            f"(allowed {allowed / MIB:.0f} MiB); {len(specs)} episodes in {took:.0f} s"
        )
        assert peak < allowed

        # SIGTERM (docker stop) stops it cleanly, every live harness with it.
        _docker("stop", "-t", "60", name, timeout=120)
        code = _docker("inspect", "-f", "{{.State.ExitCode}}", name).strip()
        assert code == "0", logs_now()
        assert "worker stopped" in logs_now()
    finally:
        _docker("rm", "-f", name, check=False)
