"""A cgroup per sandbox box, where the worker can make one (docs/containment.md).

The box's bwrap enters it before it forks anything (`enter_argv`), so every process of
the box is charged to it: memory (its tmpfs pages too), processes and CPU. The kernel
enforces the limits; `exceeded` reads its counters (an OOM kill, a refused fork) so the
worker can end the episode naming the limit.

Two layouts: cgroup v2 (one tree; the worker's own cgroup must have the memory and
pids controllers delegated, as systemd's `Delegate=yes` or a container's private
cgroup namespace gives, or the worker runs in a leaf of such a subtree, as the worker
image's entrypoint arranges: deploy/worker/entrypoint.sh) and cgroup v1 (a writable
memory and pids hierarchy, as a root worker on a v1 host has, or the entrypoint's
chowned one). Neither: `make` returns None and the sandbox falls back to rlimits (see
`sandbox.box_init`); `mode_line` says which mode applies and why.

A worker SIGKILLed with boxes open leaves their (empty) cgroups behind: named
`episodes-<worker pid>-<box id>`, they are removed at the next worker start
(`reap_dead`).
"""

from __future__ import annotations

import contextlib
import errno
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
# Set by the image's entrypoint (deploy/worker/entrypoint.sh): what it did to give the
# worker a cgroup subtree, or why it could not.
DELEGATION_ENV = "EPISODES_CGROUP_DELEGATION"
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

    def pids(self) -> list[int]:
        """The host pids of the processes in it (its pids cgroup's)."""
        d = self.dirs.get("pids") or self.dirs.get("memory")
        try:
            return [int(p) for p in (d / "cgroup.procs").read_text().split()] if d else []
        except (OSError, ValueError):
            return []

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


class NoCgroup(Exception):
    """Why this worker cannot give its boxes a cgroup (one line, for the start line and
    `episodes doctor`)."""


_NEEDED = ("memory", "pids")


def _why(e: OSError, path: Path) -> str:
    """An OSError met preparing `path`, said as what a deployer can act on."""
    if e.errno == errno.EROFS:
        return f"{path} is read-only (a container's cgroupfs)"
    if e.errno in (errno.EACCES, errno.EPERM):
        return f"{path} is not writable by uid {os.geteuid()} (not delegated to it)"
    if e.errno == errno.EBUSY:
        return (
            f"{path} holds processes, so its children get no controllers "
            "(the kernel's no-internal-processes rule: the worker must run in a leaf)"
        )
    if e.errno == errno.ENOENT:
        return f"the memory or pids controller is not available to {path}"
    return f"{path}: {e.strerror or e}"


def _unseen(d: Path) -> str:
    return (
        f"{d}, this worker's cgroup, is not in the mounted cgroupfs (a container sharing "
        "the host's cgroup namespace)"
    )


def _writable(d: Path) -> None:
    """Raises the OSError a write in `d` would meet (read-only, not ours)."""
    if not os.access(d, os.W_OK):
        with contextlib.suppress(OSError):
            if os.statvfs(d).f_flag & os.ST_RDONLY:
                raise OSError(errno.EROFS, "read-only file system", str(d))
        raise OSError(errno.EACCES, "permission denied", str(d))


def _enabled(d: Path) -> bool:
    try:
        return set(_NEEDED) <= set((d / "cgroup.subtree_control").read_text().split())
    except OSError:
        return False


def _v2_parent() -> Path:
    """Where this worker makes its boxes' cgroups on cgroup v2 (raises NoCgroup).

    Its own cgroup, with memory and pids enabled for its children (enabled here when
    they are not); or, when the worker runs in a leaf of a delegated subtree (the
    image's entrypoint puts it in `worker`, as systemd advises under `Delegate=yes`:
    a cgroup that holds processes gives its children no controllers), that subtree's
    root, beside the leaf, if it is the worker's to write."""
    own = _own("")
    if own is None:
        raise NoCgroup("/proc/self/cgroup names no cgroup v2 path")
    here = ROOT / own.lstrip("/")
    if not here.is_dir():
        raise NoCgroup(_unseen(here))
    try:
        _writable(here)
        if not _enabled(here):
            _write(here / "cgroup.subtree_control", "+memory +pids")
            with contextlib.suppress(OSError):
                _write(here / "cgroup.subtree_control", "+cpu")
        return here
    except OSError as e:
        first = e
    up = here.parent
    if here != ROOT and _enabled(up):
        try:
            _writable(up)
            _writable(up / "cgroup.procs")  # a box's bwrap moves from our leaf to its own
            return up
        except OSError:
            pass
    raise NoCgroup(_why(first, here))


def _v1_parents() -> dict[str, Path]:
    """The worker's own memory, pids (and cpu, where there is one) cgroups on cgroup
    v1, where its boxes' cgroups are made (raises NoCgroup)."""
    parents: dict[str, Path] = {}
    for controller in ("memory", "pids", "cpu"):
        own = _own(controller)
        where = ROOT / controller
        if own is None or not (where / "cgroup.procs").exists():
            if controller == "cpu":
                continue
            raise NoCgroup(f"no cgroup v1 {controller} hierarchy at {where}")
        parents[controller] = where / own.lstrip("/")
    for controller in _NEEDED:
        if not parents[controller].is_dir():
            raise NoCgroup(_unseen(parents[controller]))
        try:
            _writable(parents[controller])
        except OSError as e:
            raise NoCgroup(_why(e, parents[controller])) from None
    if "cpu" in parents and not os.access(parents["cpu"], os.W_OK):
        del parents["cpu"]  # memory and pids without a CPU quota, as a v2 cpu write can fail
    return parents


def _parents() -> tuple[int, dict[str, Path]]:
    """(cgroup version, {controller: where its box cgroups are made}); raises NoCgroup."""
    if (ROOT / "cgroup.controllers").exists():
        parent = _v2_parent()
        return 2, dict.fromkeys(("memory", "pids", "cpu"), parent)
    if not ROOT.exists():
        raise NoCgroup(f"no cgroup filesystem at {ROOT}")
    return 1, _v1_parents()


def limits_key(limits: Limits) -> tuple[int, int, float]:
    """What of `limits` a cgroup holds (the disk limit is the box's tmpfs's)."""
    return (limits.memory, limits.processes, limits.cpus)


def make(name: str, limits: Limits) -> BoxCgroup | None:
    """A new cgroup for box `name` holding `limits`, or None where this worker cannot
    make one (no delegation, no write access, no memory or pids controller)."""
    try:
        return _make(name, limits)
    except (NoCgroup, OSError) as e:
        log.debug("no cgroup for box %s: %s", name, e)
    return None


def _make(name: str, limits: Limits) -> BoxCgroup:
    name = f"{PREFIX}{os.getpid()}-{name}"
    version, parents = _parents()
    if version == 2:
        return _make_v2(parents["memory"] / name, limits)
    return _make_v1(parents, name, limits)


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


def probe() -> tuple[str | None, str]:
    """("cgroup v2"/"cgroup v1", where) when this worker can give boxes a cgroup (one is
    made and removed), else (None, why not)."""
    try:
        box = _make(f"probe-{os.urandom(3).hex()}", Limits())
    except NoCgroup as e:
        return None, str(e)
    except OSError as e:
        return None, _why(e, Path(e.filename or ROOT))
    box.remove()
    where = f"made under {box.dirs['memory'].parent}"
    if box.version == 1 and "cpu" not in box.dirs:
        where += "; no CPU quota: the cpu hierarchy is not writable"
    return f"cgroup v{box.version}", where


def available() -> str | None:
    """ "cgroup v2" / "cgroup v1" when this worker can give boxes a cgroup, else None."""
    return probe()[0]


def mode_line() -> str:
    """One line: which mode bounds this worker's sandboxes, and why (the worker's start
    line and `episodes doctor`; docs/containment.md#limits). The image's entrypoint
    says in EPISODES_CGROUP_DELEGATION what it did or why it could not."""
    how, detail = probe()
    said = os.environ.get(DELEGATION_ENV, "").strip()
    if how is not None:
        why = f"{detail}; {said}" if said else detail
        what = "memory and processes" if "no CPU quota" in detail else "memory, processes and CPU"
        return f"cgroup mode ({how}): {what} bounded by the kernel per box ({why})"
    why = said or detail
    return (
        f"rlimits mode: {why}; memory per process plus a watch of the box's shared "
        "memory, processes by RLIMIT_NPROC, no CPU quota (docs/operations/deploy.md#cgroups)"
    )


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
    try:
        return list(dict.fromkeys(_parents()[1].values()))
    except (NoCgroup, OSError):
        return []


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
