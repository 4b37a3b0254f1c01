"""A sandbox box's /etc: the few host files a program needs, in one bind.

Every bind mount costs bwrap a read of the box's mount table (to remount it read-only)
and the kernel a mount: the twelve /etc entries bound one by one were ~0.5 ms of a
box's ~7 ms of CPU. The small ones are copied instead, once per worker process, into
one directory bound as the box's /etc (read-only); the two certificate trees, whose
files a package update rewrites in place, stay binds of the host's own, on empty
mount points in that directory.

The copy follows the host: each box start compares the entries' `lstat` with those
the copy was made from (~10 stats) and copies them again when one changed. Symlinks
are copied as symlinks (`/etc/localtime`, `/etc/alternatives/*` point into /usr, which
the box binds). The directory is named by the worker's pid, so a later worker reaps it
if this one dies (`host_dirs.reap_dead_dirs`).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading

from episodes.runtimes.host_dirs import box_dir_prefix

# The few /etc entries a program needs to start (dynamic loader, users, time zone, TLS
# roots); never the whole of /etc (the worker's shadow file, its service configs).
COPIED = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "passwd",
    "group",
    "nsswitch.conf",
    "hosts",
    "localtime",
    "alternatives",
    "mime.types",
)
BOUND = ("ssl", "ca-certificates")
ETC = "/etc"  # where the host's are

_lock = threading.Lock()
# pid -> (the fingerprint its copy was made from, the copy's directory)
_copies: dict[int, tuple[tuple[object, ...], str]] = {}


def etc_binds(copy: bool = True) -> list[str] | None:
    """The bwrap arguments of a box's /etc. Copies the entries when this process has
    no copy yet or one changed on the host (a few ms: off the event loop); with
    `copy=False`, None then instead (so the event loop can ask first)."""
    mark = _fingerprint()
    with _lock:
        known = _copies.get(os.getpid())
        if known is None or known[0] != mark:
            if not copy:
                return None
            _copies[os.getpid()] = (mark, _copy())
            if known is None:
                atexit.register(_remove, os.getpid())
            else:
                shutil.rmtree(known[1], ignore_errors=True)  # mounted trees keep theirs
            known = _copies[os.getpid()]
    argv = ["--ro-bind", known[1], "/etc"]
    for name in BOUND:
        argv += ["--ro-bind-try", f"{ETC}/{name}", f"/etc/{name}"]
    return argv


def _fingerprint() -> tuple[object, ...]:
    out: list[object] = []
    for name in (*COPIED, *BOUND):
        try:
            st = os.lstat(f"{ETC}/{name}")
        except OSError:
            out.append(None)
            continue
        out.append((st.st_ino, st.st_mtime_ns, st.st_size, st.st_mode))
    return tuple(out)


def _copy() -> str:
    where = tempfile.mkdtemp(prefix=f"{box_dir_prefix()}etc-")
    os.chmod(where, 0o755)
    for name in COPIED:
        src, dst = f"{ETC}/{name}", os.path.join(where, name)
        try:
            if os.path.isdir(src) and not os.path.islink(src):
                shutil.copytree(src, dst, symlinks=True)
            elif os.path.lexists(src):
                shutil.copy2(src, dst, follow_symlinks=False)
        except OSError:
            continue  # unreadable to this worker: the box goes without, as it did
    for name in BOUND:  # mount points: the box's /etc is read-only when bwrap binds them
        if os.path.isdir(f"{ETC}/{name}"):
            os.mkdir(os.path.join(where, name))
    return where


def _remove(pid: int) -> None:
    known = _copies.pop(pid, None)
    if known is not None and pid == os.getpid():
        shutil.rmtree(known[1], ignore_errors=True)
