"""Cloud boxes a worker made and has not destroyed, in a file that outlives a SIGKILL.

A Modal sandbox or a Prime VM lives on until its platform timeout when the worker
that made it dies without stopping it; nothing on this machine would name it again.
So `RemoteBox` appends `{"op": "create", runtime, box_id, created_at, host, pid,
started}` to `<dir>/<worker-id>.jsonl` (fsync'd) in the same step as the create call
returns, before anything that can be cancelled, and `{"op": "gone", box_id}` once
the box is destroyed; the file is removed when no box of it is left.

A ledger whose writer is dead (its host is this one and its pid is gone, or is
another process now: the start time differs) names boxes nobody will stop: the next
worker start and `episodes cleanup` delete them through the SDK (`reap`). `<dir>` is
$EPISODES_BOX_LEDGER_DIR, else ~/.cache/episodes/boxes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from episodes.runtimes.backends import destroyer

log = logging.getLogger(__name__)

DIR_ENV = "EPISODES_BOX_LEDGER_DIR"
_lock = threading.Lock()
# Per ledger file: the boxes this process recorded there and has not seen destroyed.
_live: dict[Path, set[str]] = {}


def ledger_dir() -> Path:
    given = os.environ.get(DIR_ENV)
    return Path(given) if given else Path.home() / ".cache" / "episodes" / "boxes"


def ledger_path(worker: str | None) -> Path:
    """The ledger of `worker` (this process's own when there is no worker id)."""
    name = worker or f"{socket.gethostname()}-{os.getpid()}"
    return ledger_dir() / f"{name.replace('/', '_')}.jsonl"


def _started(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def _whoami() -> tuple[str, int, float | None]:
    """The writer a record names: host, pid, and the pid's start time (pids get reused)."""
    pid = os.getpid()
    return socket.gethostname(), pid, _started(pid)


def _append(path: Path, record: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def record(worker: str | None, runtime: str, box_id: str) -> None:
    """Note a box that now exists. Synchronous on purpose: no await may come between a
    create returning and this, or a cancellation there would leave no trace."""
    path = ledger_path(worker)
    with _lock:
        live = _live.setdefault(path, set())
        if box_id in live:
            return  # a retried create with the same idempotency key: the same box
        host, pid, started = _whoami()
        entry = {
            "op": "create",
            "runtime": runtime,
            "box_id": box_id,
            "created_at": time.time(),
            "host": host,
            "pid": pid,
            "started": started,
        }
        _append(path, entry)
        live.add(box_id)


def forget(worker: str | None, box_id: str) -> None:
    """Note a destroyed box; the ledger goes once it names no live box."""
    path = ledger_path(worker)
    with _lock:
        live = _live.get(path, set())
        if box_id not in live:
            return
        live.discard(box_id)
        if live:
            _append(path, {"op": "gone", "box_id": box_id})
        else:
            _live.pop(path, None)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


@dataclass(frozen=True)
class Leftover:
    runtime: str
    box_id: str
    created_at: float
    host: str
    pid: int
    started: float | None


def read(path: Path) -> list[Leftover]:
    """The boxes a ledger names as created and not destroyed (a torn last line is skipped)."""
    boxes: dict[str, Leftover] = {}
    with contextlib.suppress(FileNotFoundError), open(path) as f:
        for line in f:
            try:
                r = json.loads(line)
                if r["op"] == "create":
                    boxes[r["box_id"]] = Leftover(
                        r["runtime"],
                        r["box_id"],
                        r["created_at"],
                        r["host"],
                        r["pid"],
                        r["started"],
                    )
                elif r["op"] == "gone":
                    boxes.pop(r["box_id"], None)
            except (ValueError, KeyError, TypeError):
                continue
    return list(boxes.values())


def _writer_dead(boxes: list[Leftover], host: str) -> bool:
    if not boxes or any(b.host != host for b in boxes):
        return False  # another machine's: only that machine can tell whether it lives
    for b in boxes:
        now = _started(b.pid)
        if now is not None and (b.started is None or abs(now - b.started) < 1.0):
            return False
    return True


def dead_ledgers(worker: str | None = None) -> dict[Path, list[Leftover]]:
    """Ledgers (all, or `worker`'s) whose writer died on this host, with their boxes."""
    directory, host = ledger_dir(), socket.gethostname()
    paths = [ledger_path(worker)] if worker else sorted(directory.glob("*.jsonl"))
    out = {}
    for path in paths:
        boxes = read(path)
        if _writer_dead(boxes, host):
            out[path] = boxes
    return out


async def reap(worker: str | None = None, *, sdks: dict[str, Any] | None = None) -> int:
    """Delete the boxes of dead writers' ledgers (all, or `worker`'s); how many went.

    `sdks` maps a runtime to the SDK module to use (tests pass fakes); otherwise the
    real one is loaded, and a box whose SDK or credentials are missing stays in its
    ledger for a later try, like one whose delete failed."""
    sdks = dict(sdks or {})
    removed = 0
    for path, boxes in dead_ledgers(worker).items():
        kept = []
        for box in boxes:
            how = destroyer(box.runtime)
            try:
                if how is None:
                    raise RuntimeError(f"unknown runtime {box.runtime!r}")
                destroy, load = how
                if box.runtime not in sdks:
                    sdks[box.runtime] = load()
                await destroy(box.box_id, sdks[box.runtime])
            except Exception as e:
                log.warning("could not delete %s box %s: %s", box.runtime, box.box_id, e)
                kept.append(box)
                continue
            log.warning(
                "deleted %s box %s left by dead worker %s", box.runtime, box.box_id, path.stem
            )
            removed += 1
        _rewrite(path, kept)
    return removed


def _rewrite(path: Path, boxes: list[Leftover]) -> None:
    if not boxes:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        for b in boxes:
            f.write(json.dumps({"op": "create", **b.__dict__}) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
