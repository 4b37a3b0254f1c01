"""The Docker runtime on a real engine, with the image scripts/build-image.sh makes.

As root the image is (re)built once per test session through the script itself: a
no-op when its content hash matches, so stale harness files never go untested. Every
container of this test run carries `episodes.test_run=<RUN_ID>`, which is how the
leftover check finds them without touching anyone else's containers.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

from episodes.types.runtime import DockerConfig

NAME = "docker"
PYTHON = ["python3"]
RUN_ID = uuid.uuid4().hex[:10]
WORKER = f"test-{RUN_ID}"
IMAGE = os.environ.get("EPISODES_TEST_IMAGE", DockerConfig().image)
ROOT = Path(__file__).resolve().parents[3]
_BUILD_TIMEOUT_S = 900

_verdict: list[str | Exception | None] = []  # memo, decided once per test session


def labels() -> dict[str, str]:
    return {"worker": WORKER, "session": uuid.uuid4().hex[:12], "test_run": RUN_ID}


def client():  # type: ignore[no-untyped-def]
    import docker

    return docker.from_env(timeout=30)


def _decide() -> str | None:
    try:
        import docker
    except ImportError:
        return "the docker SDK is not installed (pip install 'episodes[docker]')"
    try:
        c = client()
        c.ping()
    except docker.errors.DockerException:
        return "no Docker engine answers (run scripts/start-docker.sh as root)"
    can_build = os.geteuid() == 0 and shutil.which("debootstrap") is not None
    if can_build and IMAGE == DockerConfig().image:
        proc = subprocess.run(
            ["bash", str(ROOT / "scripts" / "build-image.sh")],
            capture_output=True,
            text=True,
            timeout=_BUILD_TIMEOUT_S,
            check=False,
        )
        if proc.returncode != 0:
            # A build that ran and broke is a defect, not an absent engine: fail loudly.
            tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
            raise RuntimeError(f"scripts/build-image.sh failed:\n{tail}")
    try:
        c.images.get(IMAGE)
    except docker.errors.ImageNotFound:
        return f"image {IMAGE} is missing (build it as root: scripts/build-image.sh)"
    return None


AGENT_IMAGE = os.environ.get("EPISODES_TEST_AGENT_IMAGE", "episodes-agent:latest")
_agent_verdict: list[str | None] = []


def agent_skip_reason() -> str | None:
    """Like skip_reason, for the agent image (the LLM harness's packages in the box)."""
    base = skip_reason()
    if base or _agent_verdict:
        return base or _agent_verdict[0]
    if os.geteuid() == 0 and shutil.which("debootstrap") is not None:
        proc = subprocess.run(
            ["bash", str(ROOT / "scripts" / "build-image.sh")],
            capture_output=True,
            text=True,
            timeout=_BUILD_TIMEOUT_S,
            check=False,
            env={**os.environ, "EPISODES_IMAGE_FLAVOR": "agent"},
        )
        if proc.returncode != 0:
            tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
            raise RuntimeError(f"scripts/build-image.sh (agent) failed:\n{tail}")
    import docker

    try:
        client().images.get(AGENT_IMAGE)
        _agent_verdict.append(None)
    except docker.errors.ImageNotFound:
        _agent_verdict.append(
            f"image {AGENT_IMAGE} is missing "
            "(build it as root: EPISODES_IMAGE_FLAVOR=agent scripts/build-image.sh)"
        )
    return _agent_verdict[0]


def skip_reason() -> str | None:
    if not _verdict:
        try:
            _verdict.append(_decide())
        except Exception as e:
            _verdict.append(e)
    if isinstance(_verdict[0], Exception):
        raise _verdict[0]
    return _verdict[0]


def make_runtime(**overrides):  # type: ignore[no-untyped-def]
    from episodes.runtimes.docker.runtime import DockerRuntime

    return DockerRuntime(DockerConfig(image=IMAGE, **overrides), labels=labels())


def kill_box(runtime) -> None:  # type: ignore[no-untyped-def]
    client().api.kill(runtime.name)


def leftovers() -> list[str]:
    found = client().containers.list(all=True, filters={"label": f"episodes.test_run={RUN_ID}"})
    return [c.name for c in found]
