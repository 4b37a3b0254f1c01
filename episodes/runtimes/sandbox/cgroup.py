"""A cgroup per sandbox box, where the worker can make one (docs/containment.md).

The box's bwrap enters it before it forks anything (`enter_argv`), so every process of
the box is charged to it: memory (its tmpfs pages too), processes and CPU. The kernel
enforces the limits; `exceeded` reads its counters (an OOM kill, a refused fork) so the
worker can end the episode naming the limit.

Two layouts: cgroup v2 (one tree; the worker's own cgroup must have the memory and
pids controllers delegated, as systemd's `Delegate=yes` or a container's private
cgroup namespace gives) and cgroup v1 (a writable memory and pids hierarchy, as a
root worker on a v1 host has). Neither: `make` returns None and the sandbox falls
back to rlimits (see `sandbox.box_init`).

A worker SIGKILLed with boxes open leaves their (empty) cgroups behind: named
`episodes-<worker pid>-<box id>`, they are removed at the next worker start
(`reap_dead`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from episodes.runtimes.host_dirs import writer_alive
from episodes.types.runtime import Limits

log = logging.getLogger(__name__)

ROOT = Path("/sys/fs/cgroup")
PREFIX = "episodes-"
_PERIOD_US = 100_000
# Writes each cgroup.procs file named by "$1" of them, then execs the rest: the box's
# bwrap is in its cgroup before it makes a single process.
_ENTER = 'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ >"$1" || exit 125; shift; n=$((n-1)); done; exec "$@"'


def _own(controller: str) -> str | None:
    """The worker's own cgroup path in `controller`'s hierarchy ("" for v2's)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, names, path = line.split(":", 2)
        if controller in names.split(","):
            return path
    return None


def _write(path: Path, value: str) -> None:
    path.write_text(value)


@dataclass
class BoxCgroup:
    """The cgroup directories of one box (one for v2, one per controller for v1)."""

    version: int
    dirs: dict[str, Path] = field(default_factory=dict)
    # The limits written into it (`cgroup_pool` reuses a cgroup for equal limits only)
    # and its event counters when its box began (a reused cgroup's count on from
    # earlier boxes: `exceeded` reads what this box added).
    limits: tuple[int, int, float] | None = None
    base: dict[str, int] = field(default_factory=dict)

    @property
    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self._unique()]

    def enter_argv(self, argv: list[str]) -> list[str]:
        files = self.procs_files
        return ["/bin/sh", "-c", _ENTER, "sh", str(len(files)), *files, *argv]

    def counts(self) -> dict[str, int]:
        """The kernel's counts of what it refused the cgroup: OOM kills, forks."""
        return {
            "memory": counter(
                self.dirs.get("memory"),
                "memory.events" if self.version == 2 else "memory.oom_control",
                "oom_kill",
            ),
            "processes": counter(self.dirs.get("pids"), "pids.events", "max"),
        }

    def exceeded(self) -> str | None:
        """The limit the box went past ("memory", "processes"), or None."""
        for which, n in self.counts().items():
            if n > self.base.get(which, 0):
                return which
        return None

    def empty(self) -> bool:
        """No process is left in it (each controller's cgroup.procs is empty)."""
        try:
            return not any((d / "cgroup.procs").read_text().strip() for d in self._unique())
        except OSError:
            return False

    def _unique(self) -> list[Path]:
        return list(dict.fromkeys(self.dirs.values()))

    def remove(self) -> bool:
        """Removes the (empty) cgroup; False while a process is still in it."""
        ok = True
        for d in self._unique():
            try:
                d.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                ok = False
        return ok

    def kill(self) -> None:
        """SIGKILLs every process in the box's cgroup (v2's cgroup.kill; v1 by pid)."""
        for d in self._unique():
            if self.version == 2 and (d / "cgroup.kill").exists():
                with contextlib.suppress(OSError):
                    _write(d / "cgroup.kill", "1")
                continue
            with contextlib.suppress(OSError, ValueError):
                for pid in (d / "cgroup.procs").read_text().split():
                    _kill_member(int(pid), d.name)


def _kill_member(pid: int, name: str) -> None:
    """SIGKILLs `pid` if it is still in the cgroup `name`: held by a pidfd while that is
    checked, so a pid freed and taken by another process since `cgroup.procs` was read
    (pid_max can be 32768) is never signalled."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return
    try:
        if _in_cgroup(pid, name):
            signal.pidfd_send_signal(fd, signal.SIGKILL)
    except OSError:
        pass
    finally:
        os.close(fd)


def _in_cgroup(pid: int, name: str) -> bool:
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return False
    return any(line.rstrip("/").endswith("/" + name) for line in lines)


def counter(d: Path | None, name: str, key: str) -> int:
    if d is None:
        return 0
    try:
        for line in (d / name).read_text().splitlines():
            k, _, v = line.partition(" ")
            if k == key:
                return int(v)
    except (OSError, ValueError):
        pass
    return 0


def _v2_parent() -> Path | None:
    if not (ROOT / "cgroup.controllers").exists():
        return None
    own = _own("")
    if own is None:
        return None
    parent = ROOT / own.lstrip("/")
    try:
        enabled = (parent / "cgroup.subtree_control").read_text().split()
        if not {"memory", "pids"} <= set(enabled):
            _write(parent / "cgroup.subtree_control", "+memory +pids")
            with contextlib.suppress(OSError):
                _write(parent / "cgroup.subtree_control", "+cpu")
    except OSError:
        return None
    return parent


def _v1_parents() -> dict[str, Path] | None:
    parents: dict[str, Path] = {}
    for controller, mount in (("memory", "memory"), ("pids", "pids"), ("cpu", "cpu")):
        own = _own(controller)
        where = ROOT / mount
        if own is None or not (where / "cgroup.procs").exists():
            if controller == "cpu":
                continue
            return None
        parents[controller] = where / own.lstrip("/")
    return parents


def limits_key(limits: Limits) -> tuple[int, int, float]:
    """What of `limits` a cgroup holds (the disk limit is the box's tmpfs's)."""
    return (limits.memory, limits.processes, limits.cpus)


def make(name: str, limits: Limits) -> BoxCgroup | None:
    """A new cgroup for box `name` holding `limits`, or None where this worker cannot
    make one (no delegation, no write access, no memory or pids controller)."""
    name = f"{PREFIX}{os.getpid()}-{name}"
    try:
        parent = _v2_parent()
        if parent is not None:
            return _make_v2(parent / name, limits)
        parents = _v1_parents()
        if parents is not None:
            return _make_v1(parents, name, limits)
    except OSError as e:
        log.debug("no cgroup for box %s: %s", name, e)
    return None


def _make_v2(d: Path, limits: Limits) -> BoxCgroup:
    d.mkdir()
    box = BoxCgroup(2, {"memory": d, "pids": d, "cpu": d}, limits_key(limits))
    try:
        _write(d / "memory.max", str(limits.memory))
        with contextlib.suppress(OSError):
            _write(d / "memory.swap.max", "0")
        _write(d / "pids.max", str(limits.processes))
        with contextlib.suppress(OSError):
            _write(d / "cpu.max", f"{int(limits.cpus * _PERIOD_US)} {_PERIOD_US}")
    except OSError:
        box.remove()
        raise
    return box


def _make_v1(parents: dict[str, Path], name: str, limits: Limits) -> BoxCgroup:
    box = BoxCgroup(1, limits=limits_key(limits))
    try:
        for controller, parent in parents.items():
            (parent / name).mkdir()
            box.dirs[controller] = parent / name
        mem = box.dirs["memory"]
        _write(mem / "memory.limit_in_bytes", str(limits.memory))
        with contextlib.suppress(OSError):  # no swap accounting: nothing to bound
            _write(mem / "memory.memsw.limit_in_bytes", str(limits.memory))
        _write(box.dirs["pids"] / "pids.max", str(limits.processes))
        if "cpu" in box.dirs:
            with contextlib.suppress(OSError):
                _write(box.dirs["cpu"] / "cpu.cfs_period_us", str(_PERIOD_US))
                _write(box.dirs["cpu"] / "cpu.cfs_quota_us", str(int(limits.cpus * _PERIOD_US)))
    except OSError:
        box.remove()
        raise
    return box


def available() -> str | None:
    """ "cgroup v2" / "cgroup v1" when this worker can give boxes a cgroup, else None."""
    probe = make(f"probe-{os.urandom(3).hex()}", Limits())
    if probe is None:
        return None
    probe.remove()
    return f"cgroup v{probe.version}"


def _writer_dead(d: Path) -> bool:
    """Whether the worker that made cgroup `d` (`episodes-<pid>-...`) is gone: no
    process has its pid, or the one that has it started after `d` was made (a reused
    pid: another process)."""
    pid = d.name[len(PREFIX) :].split("-", 1)[0]
    if not pid.isdigit() or int(pid) == 0:
        return True
    try:
        made = d.stat().st_mtime
    except OSError:
        return False  # gone already, or not ours to read: leave it
    return not writer_alive(int(pid), made)


def parents() -> list[Path]:
    """Where this worker's boxes' cgroups are made (one per v1 controller)."""
    parents: list[Path] = []
    v2 = ROOT / "cgroup.controllers"
    if v2.exists():
        own = _own("")
        if own is not None:
            parents.append(ROOT / own.lstrip("/"))
    else:
        for controller in ("memory", "pids", "cpu"):
            own = _own(controller)
            if own is not None:
                parents.append(ROOT / controller / own.lstrip("/"))
    return parents


def reap_dead() -> int:
    """Removes the box cgroups of workers that died without removing them (their
    processes died with bwrap; an empty cgroup is all that is left). The count."""
    n = 0
    for parent in parents():
        with contextlib.suppress(OSError):
            for d in parent.iterdir():
                if d.is_dir() and d.name.startswith(PREFIX) and _writer_dead(d):
                    n += _remove_dead(BoxCgroup(1, {"x": d}))
    return n


def _remove_dead(box: BoxCgroup) -> int:
    """Kills what is left in a dead worker's box cgroup and removes it (its processes
    may still be exiting: a few tries)."""
    for _ in range(40):
        box.kill()
        if box.remove():
            return 1
        time.sleep(0.05)
    return 0
