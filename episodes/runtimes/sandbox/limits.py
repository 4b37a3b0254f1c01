"""A sandbox box's limits seen from the worker: which one it went past, (docs/containment.md).

The kernel enforces the limits (the box's cgroup, else rlimits; its sized /tmp).
`LimitWatch` reads what the kernel says, twice a second and whenever a harness process
of the box fails, and ends a box that went past one, so the episode ends
`limit_exceeded` naming it within a second or so, whatever the harness makes of the
refusal (a fork bomb retrying EAGAIN forever, a writer looping on ENOSPC).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from pathlib import Path
from typing import Protocol

import psutil

from episodes.runtimes.base import OPEN_FILES
from episodes.runtimes.sandbox import cgroup_pool
from episodes.runtimes.sandbox.cgroup import BoxCgroup
from episodes.types.runtime import Limits

log = logging.getLogger(__name__)

_POLL_S = 0.5
# A box's /tmp with less than this left is full (the kernel refused a write, or will).
_FULL_BYTES = 256 * 1024
# Processes in a box without a cgroup at this distance from the limit: at it (the rlimit
# counts threads too, and the agent's own).
_NPROC_SLACK = 4
# A process holding this close to its RLIMIT_NOFILE is at it (the kernel refuses its
# next opens; a harness retrying forever would hold its turn until it times out).
_NOFILE_SLACK = 8
_RELEASE_TRIES = 100


def size(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n} bytes"


class Watched(Protocol):
    """What the watch needs of its box (a `SandboxRuntime`)."""

    id: str

    @property
    def bwrap_pid(self) -> int | None: ...

    def kill_bwrap(self) -> None: ...


class LimitWatch:
    """Which limit a box went past; ends the box when it does."""

    def __init__(
        self,
        box: Watched,
        limits: Limits,
        group: BoxCgroup | None,
        disk: int | None,
        open_files: int = OPEN_FILES,
    ) -> None:
        self.box = box
        self.limits = limits
        self.open_files = open_files
        self.group = group
        self.disk = disk
        self.hit: str | None = None
        self._task: asyncio.Task[None] | None = None
        self._root_path: Path | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while self.hit is None:
            await asyncio.sleep(_POLL_S)
            if self.exceeded() is not None:
                log.info("sandbox %s: %s", self.box.id, self.hit)
                self._end_box()
                return

    def _end_box(self) -> None:
        if self.group is not None:
            self.group.kill()
        self.box.kill_bwrap()

    def exceeded(self) -> str | None:
        """One line naming the limit the box went past, or None (kept once found)."""
        if self.hit is None:
            which = self._check()
            if which is not None:
                self.hit = _message(which, self.limits, self.group is not None, self.open_files)
        return self.hit

    def _check(self) -> str | None:
        if self.group is not None:
            which = self.group.exceeded()
            if which is not None:
                return which
        root = self._root()
        if root is None:
            return None
        if self.disk is not None and _disk_full(root, self.disk):
            return "disk"
        pids = self._pids()
        if any(_at_open_files(p, self.open_files) for p in pids):
            return "open files"
        if self.group is None:
            with contextlib.suppress(OSError):
                n = sum(1 for p in os.listdir(root / "proc") if p.isdigit())
                if n >= self.limits.processes - _NPROC_SLACK:
                    return "processes"
            # RLIMIT_DATA bounds each process's private memory, not shared memory
            # (MAP_SHARED, System V): the box's proportional share of it all is summed.
            if sum(_pss_of(p) for p in pids) >= self.limits.memory:
                return "memory"
        return None

    def _pids(self) -> list[int]:
        """The host pids of the box's processes (its cgroup's, else bwrap's descendants);
        what cannot be read is none."""
        if self.group is not None:
            return self.group.pids()
        pid = self.box.bwrap_pid
        if pid is None:
            return []
        try:
            return [p.pid for p in psutil.Process(pid).children(recursive=True)]
        except psutil.Error:
            return []

    def _root(self) -> Path | None:
        """The box's root as the host sees it: through its pid 1, bwrap's child (found
        once: pid 1 lives as long as the box)."""
        if self._root_path is None:
            self._root_path = self._find_root()
        return self._root_path

    def _find_root(self) -> Path | None:
        pid = self.box.bwrap_pid
        if pid is None:
            return None
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            return None
        return Path(f"/proc/{children[0]}/root") if children else None

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task

    async def release(self) -> None:
        """After the box is gone: its cgroup, emptied first (and waited for), parked
        for the next box (`cgroup_pool`) or removed."""
        group = self.group
        if group is None:
            return
        for _ in range(_RELEASE_TRIES):
            group.kill()
            if cgroup_pool.park(group):
                return
            await asyncio.sleep(0.05)
        log.warning("sandbox %s: its cgroup %s is still busy", self.box.id, group.dirs)


def _pss_of(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _at_open_files(pid: int, limit: int) -> bool:
    """Whether process `pid` holds (about) `limit` open files. Its fd table's size
    (FDSize, a power of two that grows as higher fds are used) screens cheaply; only a
    process whose table reached the limit has its fds counted."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"FDSize:"):
                    if int(line.split()[1]) < limit:
                        return False
                    break
            else:
                return False
        return len(os.listdir(f"/proc/{pid}/fd")) >= limit - _NOFILE_SLACK
    except (OSError, ValueError, IndexError):
        return False


def _disk_full(root: Path, disk: int) -> bool:
    """The box's /tmp (its workdir in it) or /dev/shm is full, or both together hold
    its disk budget."""
    used = 0
    for mount in ("tmp", "dev/shm"):
        with contextlib.suppress(OSError):
            st = os.statvfs(root / mount)
            if st.f_bavail * st.f_frsize < _FULL_BYTES:
                return True
            used += (st.f_blocks - st.f_bfree) * st.f_frsize
    return used >= disk - _FULL_BYTES


def _message(which: str, limits: Limits, cgroup: bool, open_files: int = OPEN_FILES) -> str:
    if which == "memory":
        how = (
            "the kernel killed a process of it"
            if cgroup
            else "its processes held that much (shared memory included)"
        )
        return (
            f"the box went past its memory limit ({size(limits.memory)}, "
            f"harness.runtime.limits.memory): {how}"
        )
    if which == "processes":
        how = "its cgroup refused a fork" if cgroup else "it holds as many as its rlimit allows"
        return (
            f"the box went past its process limit ({limits.processes}, "
            f"harness.runtime.limits.processes): {how}"
        )
    if which == "open files":
        return (
            f"the box went past its open-files limit ({open_files} per process, "
            "RLIMIT_NOFILE): a process of it holds that many"
        )
    return (
        f"the box went past its disk limit ({size(limits.disk)} for its workdir, /tmp and /dev/shm, "
        "harness.runtime.limits.disk): it filled them"
    )
