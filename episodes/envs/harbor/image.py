"""A Harbor task's image: built from its environment/ with the local engine, once per host.

The tag is a hash of the environment directory (every file's path, mode and bytes),
`episodes-harbor:<hash>`, so tasks with identical environments share one image, an
edited Dockerfile gets a new one, and a worker that has it skips the build: built once
per worker host, never per episode. Concurrent episodes of one task on a host wait
for the same build (a file lock). `[environment].docker_image`, when given, is used
instead (pulled once if the engine does not have it).
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from episodes.envs.harbor.task import HarborTask, HarborTaskError
from episodes.errors import ImageMissing

log = logging.getLogger(__name__)
REPOSITORY = "episodes-harbor"


@dataclass(frozen=True)
class TaskImage:
    tag: str
    workdir: str  # the image's WORKDIR ("/" when it names none)
    built: bool  # built now (False: the host had it)


def environment_hash(env_dir: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(env_dir.rglob("*")):
        rel = path.relative_to(env_dir).as_posix()
        if path.is_symlink():
            digest.update(f"L {rel} {os.readlink(path)}\0".encode())
        elif path.is_file():
            digest.update(f"F {rel} {path.stat().st_mode & 0o777:o}\0".encode())
            digest.update(path.read_bytes())
        elif path.is_dir():
            digest.update(f"D {rel}\0".encode())
    return digest.hexdigest()[:20]


def ensure_image(task: HarborTask) -> TaskImage:
    """The task's image on this engine, built (or pulled) now if missing. Blocking."""
    from episodes.runtimes.docker.engine import docker, shared_client

    client = shared_client()
    env = task.config.environment
    if env.docker_image is not None:
        return _given(client, docker, task, env.docker_image)
    tag = f"{REPOSITORY}:{environment_hash(task.path / 'environment')}"
    found = _inspect(client, docker, tag)
    if found is not None:
        return TaskImage(tag, found, built=False)
    from episodes.runtimes.docker.bundle import cache_dir

    locks = cache_dir() / "harbor-locks"
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / f"{tag.split(':')[1]}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = _inspect(client, docker, tag)
        if found is not None:
            return TaskImage(tag, found, built=False)
        log.info("harbor task %s: building %s", task.name, tag)
        try:
            # The engine's own build timeout is the client's socket timeout.
            api = docker.from_env(timeout=int(env.build_timeout_sec) + 30).api
            lines = []
            for chunk in api.build(
                path=str(task.path / "environment"),
                tag=tag,
                rm=True,
                forcerm=True,
                decode=True,
                labels={"episodes.harbor.task": task.name},
            ):
                if "stream" in chunk:
                    lines.append(chunk["stream"])
                if "error" in chunk:
                    tail = "".join(lines)[-800:] + chunk["error"]
                    raise HarborTaskError(
                        f"harbor task {task.name}: docker build of environment/ failed: "
                        f"{' | '.join(tail.strip().splitlines()[-6:])}"
                    )
        except docker.errors.APIError as e:
            raise HarborTaskError(
                f"harbor task {task.name}: docker build of environment/ failed: {e}"
            ) from None
        except Exception as e:  # the socket timeout of a build past build_timeout_sec
            if "timed out" in str(e).lower():
                raise HarborTaskError(
                    f"harbor task {task.name}: docker build took longer than "
                    f"environment.build_timeout_sec ({env.build_timeout_sec:g} s)"
                ) from None
            raise
        found = _inspect(client, docker, tag)
        assert found is not None, f"{tag} was built but is not on the engine"
        return TaskImage(tag, found, built=True)


def _given(client: object, docker: object, task: HarborTask, image: str) -> TaskImage:
    found = _inspect(client, docker, image)
    if found is not None:
        return TaskImage(image, found, built=False)
    try:
        client.images.pull(image)  # type: ignore[attr-defined]
    except Exception as e:
        raise ImageMissing(
            f"harbor task {task.name}: environment.docker_image {image!r} is not on this "
            f"engine and cannot be pulled ({str(e).splitlines()[0][:200]})"
        ) from None
    found = _inspect(client, docker, image)
    assert found is not None
    return TaskImage(image, found, built=True)


def _inspect(client: object, docker: object, tag: str) -> str | None:
    """The image's WORKDIR if the engine has `tag`, else None."""
    try:
        info = client.api.inspect_image(tag)  # type: ignore[attr-defined]
    except docker.errors.ImageNotFound:  # type: ignore[attr-defined]
        return None
    return (info.get("Config") or {}).get("WorkingDir") or "/"
