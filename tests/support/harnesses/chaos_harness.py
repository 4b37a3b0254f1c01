"""Harnesses for the chaos tests: a deterministic one that logs every turn it sees, and
hostile ones. Stdlib and the harness SDK only, so it also runs in the Docker image
(bind-mounted: tests/workers/test_hostile.py mounts this folder read-only).

Run by file path: `python chaos_harness.py MODE [key=value ...]`; `tag=...` is ignored
(the tests put a unique tag in the argv to find their processes by command line).
Modes:
  log delay=S dir=D start=T hold=H
                      sleep T seconds before saying ready (a slow start); echo each
                      message after S seconds; with `dir`, first append
                      {"turn", "message", "pid"} as a JSON line to D/<key>.log, where
                      <key> is the message up to its first ':' (the task id). A message
                      ending in ':hang' is never answered; one ending in ':held' is
                      answered once no file H exists.
  hog                 echo; at turn 1 allocate (and touch) memory until killed
  fork-bomb           echo; at turn 1 every process forks forever (retrying on EAGAIN)
  fill path=P         echo; at turn 1 write files in P (default /tmp) forever (retrying on
                      ENOSPC); `fill path=/dev/shm` fills shared memory
  shared-mmap         echo; at turn 1 map shared anonymous memory (mmap(-1, ...), which
                      RLIMIT_DATA does not count) 8 MiB at a time, touched, forever
  open-files          echo; at turn 1 open files forever (retrying on EMFILE)
  deaf                echo turn 0, then never read stdin again and never answer
  probe look=A,B look_s=S frontend=H:P outside=P1,P2
                      at turn 0, try to escape its box and reply with what it got:
                      which of the variables A, B it can read in other processes'
                      /proc/*/environ (looking for up to S seconds), whether a TCP
                      connection to H:P opens, which files P1, P2 it could write;
                      then leave a daemon behind (double fork + setsid, stdio on
                      /dev/null). Echo on later turns.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the checkout's root

from episodes.harness import sdk

MIB = 1024 * 1024


def sleep_forever() -> None:
    while True:
        time.sleep(3600)


def logging_echo(delay: float, folder: str | None, hold: str | None = None):
    def handle(turn, message, emit):
        if folder is not None:
            key = str(message).split(":", 1)[0]
            line = json.dumps({"turn": turn, "message": message, "pid": os.getpid()})
            with open(os.path.join(folder, f"{key}.log"), "a") as f:
                f.write(line + "\n")
        time.sleep(delay)
        if isinstance(message, str) and message.endswith(":hang"):
            sleep_forever()
        if hold is not None and isinstance(message, str) and message.endswith(":held"):
            while os.path.exists(hold):
                time.sleep(0.1)
        return message

    return handle


def hog() -> None:
    hoard = []
    while True:
        block = bytearray(8 * MIB)
        for i in range(0, len(block), 4096):  # touch every page: RSS, not just address space
            block[i] = 1
        hoard.append(block)
        sys.stderr.write(f"hog: holding {len(hoard) * 8} MiB\n")
        sys.stderr.flush()


def shared_mmap() -> None:
    import mmap

    maps = []
    while True:
        try:
            m = mmap.mmap(-1, 8 * MIB)  # MAP_SHARED | MAP_ANONYMOUS
            for i in range(0, len(m), 4096):
                m[i] = 1
            maps.append(m)
        except OSError:
            time.sleep(0.05)
            continue
        sys.stderr.write(f"shared-mmap: holding {len(maps) * 8} MiB\n")
        sys.stderr.flush()


def open_files() -> None:
    held = []
    while True:
        try:
            held.append(open(os.devnull, "rb"))  # held open on purpose
        except OSError:
            time.sleep(0.05)  # the open-files limit: keep pressing


def fork_bomb() -> None:
    sys.stderr.write("fork-bomb: forking\n")
    sys.stderr.flush()
    while True:
        try:
            os.fork()  # parent and child both go on forking
        except OSError:
            time.sleep(0.05)  # the pids limit: keep pressing


def fill(path: str) -> None:
    sys.stderr.write(f"fill: writing in {path}\n")
    sys.stderr.flush()
    block, n = b"x" * MIB, 0
    while True:
        try:
            with open(os.path.join(path, f"fill-{os.getpid()}-{n}"), "wb") as f:
                for _ in range(8):
                    f.write(block)
            n += 1
        except OSError:
            time.sleep(0.05)  # the disk limit: keep pressing


def environ_names(wanted: set[str], look_s: float) -> list[str]:
    """Of `wanted`, the variable names found in other processes' environments."""
    seen: set[str] = set()
    deadline = time.monotonic() + look_s
    while True:
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == os.getpid():
                continue
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    entries = f.read().split(b"\0")
            except OSError:
                continue
            seen.update(e.split(b"=", 1)[0].decode(errors="replace") for e in entries)
        if wanted <= seen or time.monotonic() >= deadline:
            return sorted(wanted & seen)
        time.sleep(0.2)


def connects(address: str) -> str:
    import socket

    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=5):
            return "connected"
    except OSError as e:
        return f"refused: {e}"


def writes(paths: list[str]) -> list[str]:
    done = []
    for path in paths:
        try:
            with open(path, "w") as f:
                f.write("escaped\n")
            done.append(path)
        except OSError:
            pass
    return done


def leave_daemon() -> None:
    child = os.fork()
    if child == 0:
        os.setsid()  # out of the harness's session and process group
        if os.fork() == 0:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            sleep_forever()
        os._exit(0)
    os.waitpid(child, 0)


def probe(opts: dict[str, str]):
    def handle(turn, message, emit):
        if turn != 0:
            return message
        found = {
            "environ": environ_names(set(opts["look"].split(",")), float(opts["look_s"])),
            "frontend": connects(opts["frontend"]),
            "wrote": writes(opts["outside"].split(",")),
        }
        leave_daemon()
        return found

    return handle


HOSTILE = {"hog": hog, "fork-bomb": fork_bomb, "shared-mmap": shared_mmap, "open-files": open_files}


def main(argv: list[str]) -> None:
    mode = argv[0] if argv else "log"
    opts = dict(arg.split("=", 1) for arg in argv[1:])
    if mode == "log":
        time.sleep(float(opts.get("start", "0")))
        sdk.serve(logging_echo(float(opts.get("delay", "0")), opts.get("dir"), opts.get("hold")))
    elif mode == "probe":
        sdk.serve(probe(opts))
    elif mode == "fill":
        path = opts.get("path", "/tmp")
        sdk.serve(lambda turn, message, emit: fill(path) if turn == 1 else message)
    elif mode in HOSTILE:
        act = HOSTILE[mode]
        sdk.serve(lambda turn, message, emit: act() if turn == 1 else message)
    elif mode == "deaf":
        # By hand, not sdk.serve: the SDK reads a whole turn before its handler runs.
        sdk.die_with_parent()
        out = sys.stdout.buffer
        out.write(sdk.encode({"type": "ready"}))
        out.flush()
        packet = sdk.read_packet(sys.stdin.buffer)
        if packet is not None and packet.get("type") == "turn":
            out.write(sdk.encode({"type": "reply", "turn": 0, "message": packet["message"]}))
            out.flush()
        sys.stderr.write("deaf: not reading stdin any more\n")
        sys.stderr.flush()
        sleep_forever()
    else:
        sys.exit(f"chaos_harness: unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
