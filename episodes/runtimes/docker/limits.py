"""A Docker box's limits seen from the worker: which one it went past (docs/containment.md).

The engine enforces them (its cgroup: memory, pids, CPU; a sized /tmp tmpfs). Where
the engine runs on the worker's host and the worker may read the container's cgroup
and root (`/proc/<init pid>/...`, checked to be this container's), a watch reads the
kernel's counters every second and kills a container past a limit, so its episode
ends `limit_exceeded` within seconds, as a sandbox's does. Elsewhere (a remote
engine) the engine's API is asked when a harness process fails or a turn times out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from pathlib import Path
from typing import Any, Protocol

from episodes.runtimes.docker.engine import call
from episodes.runtimes.sandbox.cgroup import ROOT, counter
from episodes.runtimes.sandbox.limits import size
from episodes.types.runtime import DockerConfig

log = logging.getLogger(__name__)

_POLL_S = 1.0
_FULL_BYTES = 256 * 1024


class Watched(Protocol):
    """What the watch needs of its box (a `DockerRuntime`)."""

    id: str
    name: str
    config: DockerConfig
    api: Any


class DockerLimitWatch:
    def __init__(self, box: Watched) -> None:
        self.box = box
        self.hit: str | None = None
        self._pid = 0
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        with contextlib.suppress(Exception):
            info = await call(self.box.api.inspect_container, self.box.name)
            self._pid = int(info["State"].get("Pid") or 0)
        if self._cgroup("memory") is not None:  # this host's engine: watch it
            self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task

    async def _run(self) -> None:
        while self.hit is None:
            await asyncio.sleep(_POLL_S)
            which = self._local()
            if which is not None:
                self.hit = self._message(which)
                log.info("container %s: %s", self.box.name, self.hit)
                with contextlib.suppress(Exception):
                    await call(self.box.api.kill, self.box.name)
                return

    async def exceeded(self) -> str | None:
        """One line naming the limit the box went past, or None (kept once found)."""
        if self.hit is None:
            which = self._local() or await self._from_engine()
            if which is not None:
                self.hit = self._message(which)
        return self.hit

    def _local(self) -> str | None:
        memory = self._cgroup("memory")
        if memory is not None:
            v2 = (memory / "memory.events").exists()
            name = "memory.events" if v2 else "memory.oom_control"
            if counter(memory, name, "oom_kill"):
                return "memory"
        pids = self._cgroup("pids")
        if pids is not None and counter(pids, "pids.events", "max"):
            return "processes"
        if self.box.config.read_only and self._cgroup("memory") is not None:
            with contextlib.suppress(OSError):
                st = os.statvfs(f"/proc/{self._pid}/root/tmp")
                if st.f_bavail * st.f_frsize < _FULL_BYTES:
                    return "disk"
        return None

    async def _from_engine(self) -> str | None:
        api: Any = self.box.api
        if api is None:
            return None
        try:
            info = await call(api.inspect_container, self.box.name)
            if info["State"].get("OOMKilled"):
                return "memory"
            stats = await call(api.stats, self.box.name, stream=False, one_shot=True)
        except Exception:  # gone, or the engine does not answer: nothing to say
            return None
        current = int((stats.get("pids_stats") or {}).get("current") or 0)
        return "processes" if current >= self.box.config.limits.processes else None

    def _cgroup(self, controller: str) -> Path | None:
        """The container's cgroup directory of `controller` on this host, or None."""
        if not self._pid or not self.box.id:
            return None
        try:
            lines = Path(f"/proc/{self._pid}/cgroup").read_text().splitlines()
        except OSError:
            return None
        for line in lines:
            _, names, path = line.split(":", 2)
            if self.box.id not in path:
                continue
            if names == "":
                d = ROOT / path.lstrip("/")
            elif controller in names.split(","):
                d = ROOT / controller / path.lstrip("/")
            else:
                continue
            if d.is_dir():
                return d
        return None

    def _message(self, which: str) -> str:
        limits = self.box.config.limits
        if which == "memory":
            return (
                f"the box went past its memory limit ({size(limits.memory)}, "
                "harness.runtime.limits.memory): the kernel killed a process of it"
            )
        if which == "processes":
            return (
                f"the box went past its process limit ({limits.processes}, "
                "harness.runtime.limits.processes): its pids limit refused a fork"
            )
        return (
            f"the box went past its disk limit ({size(limits.disk)} for its /tmp, "
            "harness.runtime.limits.disk): it filled it"
        )
