"""Box cgroups kept for the next box, so a sandbox's start does not make one.

Making a box's cgroups (a memory, a pids and a cpu cgroup on v1, one on v2) and
removing them after costs the kernel ~1-2 ms of CPU a box and the stop tens of ms of
waiting (rmdir fails until the box's last process is gone). A stopped box's cgroup,
once no process is left in it, is parked here instead and handed to the next box of
the same limits:

- only an empty cgroup is parked (its `cgroup.procs` read empty after the box's
  processes were killed): nothing of a box outlives it into the next;
- its limits were written when it was made and are the next box's too (equal limits
  only: no write to a cgroup that may still hold the last box's page cache);
- the kernel's event counters (OOM kills, refused forks) only grow: a leased cgroup
  carries their values at lease (`BoxCgroup.base`), and `exceeded` reads the growth.

At most `MAX_PARKED` wait; the rest are removed. They are removed when the worker
exits; a SIGKILLed worker's are named with its pid and reaped by the next worker
(`cgroup.reap_dead`), as a box's own cgroups are.
"""

from __future__ import annotations

import atexit
import os
import threading

from episodes.runtimes.sandbox.cgroup import BoxCgroup, limits_key
from episodes.types.runtime import Limits

MAX_PARKED = 256

_lock = threading.Lock()
_parked: list[BoxCgroup] = []
_owner = os.getpid()  # a forked child starts with no parked cgroups of its own
_atexit = False


def lease(limits: Limits) -> BoxCgroup | None:
    """A parked cgroup of these limits, its counters read as its new box's base; None
    when none is parked (make one: `cgroup.make`)."""
    key = limits_key(limits)
    with _lock:
        _forked()
        for i in range(len(_parked) - 1, -1, -1):
            if _parked[i].limits == key:
                group = _parked.pop(i)
                break
        else:
            return None
    group.base = group.counts()
    return group


def park(group: BoxCgroup) -> bool:
    """Keeps `group` for a later box when no process is left in it, else False (the
    caller kills again and retries). Removed instead when enough wait."""
    if not group.empty():
        return False
    global _atexit
    with _lock:
        _forked()
        if len(_parked) < MAX_PARKED:
            _parked.append(group)
            if not _atexit:
                atexit.register(clear)
                _atexit = True
            return True
    return group.remove()


def clear() -> int:
    """Removes every parked cgroup (the worker's exit). The count removed."""
    with _lock:
        groups, _parked[:] = list(_parked), []
    return sum(1 for g in groups if g.remove())


def _forked() -> None:
    global _owner
    if os.getpid() != _owner:  # the parent's cgroups are the parent's
        _parked.clear()
        _owner = os.getpid()
