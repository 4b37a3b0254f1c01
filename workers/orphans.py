"""Boxes left by a worker on this host that died without cleaning up (SIGKILL, OOM).

Subprocess harnesses die with their worker (PR_SET_PDEATHSIG); their sandboxes' host
directories (named by the worker's pid), containers and cloud boxes do not. Worker ids are `<host>-<pid>-<rand>`, so at start a worker removes the
labelled containers of workers on its own host whose process no longer exists (or is
another process now: its start time differs from the one the container is labelled
with, as a restarted compose container's new worker under the old pid), and
deletes the Modal sandboxes and Prime VMs that dead workers' ledgers still name
(`episodes.runtimes.cloud.ledger`). Other hosts' are left to their own workers (or
`episodes cleanup` there).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from typing import Any

import psutil

log = logging.getLogger("episodes.worker")


def dead_local_workers(workers: dict[str, set[float | None]], host: str | None = None) -> list[str]:
    """The workers (id -> the start times their boxes name) that ran on this host and
    are gone: their pid is free, or another process holds it now. Boxes from before
    the start-time label (None) have only the pid to go by."""
    host = host or socket.gethostname()
    dead = []
    for wid, started in workers.items():
        rest = wid[len(host) + 1 :] if wid.startswith(f"{host}-") else None
        pid = rest.split("-", 1)[0] if rest else ""
        if pid.isdigit() and not _same_process(int(pid), started):
            dead.append(wid)
    return dead


def _same_process(pid: int, started: set[float | None]) -> bool:
    """As the box ledger decides: the pid lives and, when known, started then (1 s slack:
    the start time is rounded)."""
    try:
        now = psutil.Process(pid).create_time()
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True  # it exists but cannot be read (another user's): assume it is ours
    return all(s is None or abs(now - s) < 1.0 for s in started)


def reap_orphan_containers() -> int:
    """Remove this host's dead workers' containers; 0 when Docker is not in use here."""
    try:
        from episodes.runtimes.docker.engine import cleanup_orphans, worker_containers

        owners = worker_containers()
    except Exception:  # no SDK or no engine: nothing of ours can be there
        return 0
    removed = 0
    for wid in dead_local_workers(owners):
        n = cleanup_orphans(worker=wid)
        log.warning("removed %d container(s) left by dead worker %s", n, wid)
        removed += n
    return removed


async def reap_orphan_boxes(
    worker: str | None = None, *, sdks: dict[str, Any] | None = None
) -> int:
    """Delete the cloud boxes dead local workers' ledgers name (all, or `worker`'s)."""
    from episodes.runtimes.cloud import ledger

    return await ledger.reap(worker, sdks=sdks)


def reap_orphan_sandboxes() -> int:
    """Remove the host directories (and empty cgroups) of sandbox boxes whose worker
    died: the boxes died with it (`--die-with-parent`), those did not."""
    from episodes.runtimes.host_dirs import reap_dead_dirs
    from episodes.runtimes.sandbox import cgroup

    n = reap_dead_dirs()
    with contextlib.suppress(OSError):
        cgroup.reap_dead()
    if n:
        log.warning("removed %d sandbox director(y/ies) left by dead workers", n)
    return n


def reap_orphans() -> int:
    """Everything dead local workers left: sandbox directories, containers, then cloud
    boxes (a thread's call)."""
    removed = reap_orphan_sandboxes() + reap_orphan_containers()
    try:
        removed += asyncio.run(reap_orphan_boxes())
    except Exception as e:  # a worker starts anyway; the boxes stay in their ledgers
        log.warning("could not reap cloud boxes of dead workers: %s", e)
    return removed
