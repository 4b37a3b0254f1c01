"""The Docker engine side shared by every box: one client, removal, orphan cleanup.

Blocking SDK calls run in a thread pool of their own, so the event loop never blocks
and a busy default executor never delays a stop.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from episodes.errors import RuntimeUnavailable

try:
    import docker
    import docker.errors
    import docker.types
except ImportError:  # pragma: no cover - the [docker] extra is not installed
    # [assignment]: None in place of the module is how "no SDK" is spelt here; every
    # entry point checks `docker is None` first and raises RuntimeUnavailable.
    docker = None  # type: ignore[assignment]

log = logging.getLogger(__name__)
T = TypeVar("T")

MANAGED_LABEL = "episodes.managed"
# The start time of the process that made the container (its worker), epoch seconds.
WORKER_STARTED_LABEL = "episodes.worker_started"
ENGINE_HINT = "start one with scripts/start-docker.sh (as root) or your Docker service"
_REMOVE_WAIT_S = 30.0

_pool = concurrent.futures.ThreadPoolExecutor(max_workers=32, thread_name_prefix="episodes-docker")
# Writes to a process's stdin block for as long as it does not read; they get threads of
# their own, so a harness that never reads cannot starve the kills and removals above.
_stdin_pool = concurrent.futures.ThreadPoolExecutor(
    max_workers=512, thread_name_prefix="episodes-docker-stdin"
)
_client_lock = threading.Lock()
_client: Any = None
# Container names this process created and has not removed: the atexit backstop.
owned: set[str] = set()


async def call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a blocking engine call off the event loop."""
    return await asyncio.get_running_loop().run_in_executor(_pool, lambda: fn(*args, **kwargs))


async def call_stdin(fn: Callable[..., T], *args: Any) -> T:
    """Run a blocking socket write off the event loop (see `_stdin_pool`)."""
    return await asyncio.get_running_loop().run_in_executor(_stdin_pool, fn, *args)


# The engine client's timeout for API calls. The SDK also puts it on the sockets of
# attached execs: those are made blocking again (docker.process), since a harness may
# rightly be silent for longer than any API call takes.
API_TIMEOUT_S = 60


def shared_client() -> Any:
    """One client per process (its connection pool is shared by every box)."""
    global _client
    if docker is None:
        raise RuntimeUnavailable(
            "the Docker runtime needs the docker SDK: pip install 'episodes[docker]'"
        )
    with _client_lock:
        if _client is None:
            try:
                client = docker.from_env(timeout=API_TIMEOUT_S, max_pool_size=64)
                client.ping()
            except docker.errors.DockerException as e:
                raise RuntimeUnavailable(f"no Docker engine answers ({e}); {ENGINE_HINT}") from None
            _client = client
        return _client


def remove(api: Any, name: str) -> None:
    """Force-remove a container; "already gone" and "removal in progress" are success."""
    try:
        api.remove_container(name, force=True, v=True)
    except docker.errors.NotFound:
        return
    except docker.errors.APIError as e:
        if e.status_code != 409:  # 409: someone else is removing it right now
            raise
        for _ in range(int(_REMOVE_WAIT_S / 0.2)):
            try:
                api.inspect_container(name)
            except docker.errors.NotFound:
                return
            time.sleep(0.2)
        raise


def cleanup_orphans(client: Any = None, *, worker: str | None = None) -> int:
    """Remove every container this package labelled (or only `worker`'s); returns the count."""
    api = getattr(client or shared_client(), "api", client)
    labels = [f"{MANAGED_LABEL}=true"]
    if worker is not None:
        labels.append(f"episodes.worker={worker}")
    removed = 0
    for c in api.containers(all=True, filters={"label": labels}):
        with contextlib.suppress(docker.errors.NotFound):
            remove(api, c["Id"])
            removed += 1
    return removed


@atexit.register
def _removeowned() -> None:
    # Backstop for a worker that exits without stopping its boxes (an unhandled error,
    # a test that forgot): containers must not outlive the process that made them.
    if not owned or _client is None:
        return
    for name in list(owned):
        try:
            remove(_client.api, name)
        except Exception as e:  # at exit there is no one left to raise to
            log.warning("could not remove container %s at exit: %s", name, e)
        owned.discard(name)


def image_available(image: str) -> bool:
    """True when an engine answers and has `image` locally (no registry is ever asked)."""
    try:
        shared_client().api.inspect_image(image)
    except Exception:  # no SDK, no engine, no image: all mean "not here"
        return False
    return True


def worker_containers(client: Any = None) -> dict[str, set[float | None]]:
    """The workers owning containers of this package: worker label -> the worker start
    times those containers carry (None: a container from before that label)."""
    api = getattr(client or shared_client(), "api", client)
    out: dict[str, set[float | None]] = {}
    for c in api.containers(all=True, filters={"label": [f"{MANAGED_LABEL}=true"]}):
        labels = c["Labels"] or {}
        try:
            started: float | None = float(labels[WORKER_STARTED_LABEL])
        except (KeyError, ValueError):
            started = None
        out.setdefault(labels.get("episodes.worker", ""), set()).add(started)
    return out
