"""What `Box.copy_in` reads of a host directory: its tree, without following any link.

The directory is task content (a Harbor task's `tests/`, `solution/`), written by
strangers. A link in it is a link, whatever it points at: read as a link
(`os.readlink`) and recreated as one in the box, never followed on the worker, so a
`tests/notes.txt -> /proc/self/environ` does not copy the worker's environment (its
API keys) into the box, and `tests/key -> ~/.ssh/id_ed25519` does not copy the key.
Files are opened with `O_NOFOLLOW` (and `O_NONBLOCK`, so a FIFO swapped in cannot
hang the worker) and must still be regular files once open. Anything else (a FIFO,
a socket, a device) is refused with one line naming it: nothing outside the
directory is ever read.

Only the top directory itself is the caller's to choose (a link there is followed:
it is where the caller said the content is).
"""

from __future__ import annotations

import io
import os
import stat
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal


@dataclass(frozen=True)
class Entry:
    """One thing under the copied directory."""

    rel: str  # its path relative to the directory, '/'-separated
    kind: Literal["dir", "file", "link"]
    mode: int = 0o755  # permission bits (dirs and files)
    mtime: float = 0.0
    data: bytes = b""  # a file's bytes
    target: str = ""  # a link's target, as written in the link


def read_tree(source: Path) -> list[Entry]:
    """Every directory, file and link under `source` (parents before children), links
    unfollowed. OSError (one line, naming the entry) for anything else."""
    if not source.is_dir():
        raise NotADirectoryError(f"{source}: not a directory")
    out: list[Entry] = []
    _walk(source, "", out)
    return out


def _walk(directory: Path, prefix: str, out: list[Entry]) -> None:
    with os.scandir(directory) as it:
        entries = sorted(it, key=lambda e: e.name)
    for entry in entries:
        rel = f"{prefix}{entry.name}"
        info = entry.stat(follow_symlinks=False)
        if stat.S_ISLNK(info.st_mode):
            out.append(Entry(rel, "link", target=os.readlink(entry.path)))
        elif stat.S_ISDIR(info.st_mode):
            out.append(Entry(rel, "dir", stat.S_IMODE(info.st_mode), info.st_mtime))
            _walk(Path(entry.path), f"{rel}/", out)
        elif stat.S_ISREG(info.st_mode):
            out.append(_file(Path(entry.path), rel))
        else:
            raise OSError(f"{directory / entry.name}: not a file, directory or link; not copied")


def _file(path: Path, rel: str) -> Entry:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):  # replaced since the directory was listed
            raise OSError(f"{path}: not a regular file; not copied")
        data = f.read()
    return Entry(rel, "file", stat.S_IMODE(info.st_mode), info.st_mtime, data)


def tar_of(entries: list[Entry]) -> bytes:
    """The entries as an uncompressed tar (owners root: the box's user extracts it)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for e in entries:
            info = tarfile.TarInfo(f"./{e.rel}")
            info.mode, info.mtime = e.mode, int(e.mtime)
            if e.kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif e.kind == "link":
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, e.target, 0o777
                tar.addfile(info)
            else:
                info.size = len(e.data)
                tar.addfile(info, io.BytesIO(e.data))
    return buf.getvalue()
