"""A box's directories on the worker's host, and their leftovers when the worker that
made them died (the sandbox's, a plain subprocess box's, a Docker box's channel).

A directory's name carries the pid that made it, so a later worker knows whose it is;
`reap_dead_dirs` removes those of dead workers (`sandbox.cgroup.reap_dead` their
sandboxes' cgroups, by the same test: `writer_alive`).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile

import psutil

_BOX_DIR = re.compile(r"^episodes-box-(\d+)-")


def box_dir_prefix() -> str:
    """The name a box's host directory starts with: the pid that made it, so a later
    worker knows whose it is (`reap_dead_dirs`)."""
    return f"episodes-box-{os.getpid()}-"


def writer_alive(pid: int, mtime: float) -> bool:
    """The pid lives, and started before the directory last changed (else it is
    another process under a reused pid)."""
    try:
        return psutil.Process(pid).create_time() <= mtime + 1.0
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True  # there, not ours to read: leave it


def reap_dead_dirs(tmp: str | None = None) -> int:
    """Removes the host directories of sandbox boxes whose worker died without
    removing them (SIGKILL, OOM: the boxes died with it, their directories did not).
    The count of directories removed."""
    tmp = tmp or tempfile.gettempdir()
    removed = 0
    with contextlib.suppress(OSError):
        for entry in os.scandir(tmp):
            m = _BOX_DIR.match(entry.name)
            if m is None or not entry.is_dir(follow_symlinks=False):
                continue
            try:
                mtime = entry.stat(follow_symlinks=False).st_mtime
            except OSError:
                continue
            if int(m.group(1)) != os.getpid() and not writer_alive(int(m.group(1)), mtime):
                shutil.rmtree(entry.path, ignore_errors=True)
                removed += 1
    return removed
