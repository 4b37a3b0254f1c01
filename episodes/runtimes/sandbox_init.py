"""The sandbox's in-box agent: starts, signals and sweeps processes on the worker's behalf.

Stdlib only, no imports from this package: bubblewrap runs it inside the box as
`python -I sandbox_init.py` (pid 2; bwrap's own reaper is pid 1). Every process of
the box is its child, so all of them share the box's namespaces (the relay's loopback
port is the harness's loopback port), and the whole box dies with bwrap's pid 1.

The worker talks to it over one Unix stream socket (the fd named by its argument),
newline-delimited JSON:

    worker -> box  {"op": "spawn", "id": N, "argv": [...], "env": {...}, "cwd": "..."}
                   with SCM_RIGHTS: the process's stdin, stdout and stderr (3 fds)
                   {"op": "signal", "id": N, "pid": P, "sig": S}   killpg(P, S)
                   {"op": "sweep", "id": N}     SIGKILL all but pid 1 and this agent
    box -> worker  {"ready": true}                                 once, at start
                   {"id": N, "pid": P} | {"id": N, "error": "...", "errno": E}
                   {"id": N, "ok": true} | {"id": N, "clean": bool}
                   {"exit": P, "code": C}        a child ended (C < 0: signal -C)

Hazard: the harness runs as the same user in the same box and could kill this agent
(its box then ends: a harness that does so only crashes its own session) or, were
it dumpable, take its socket over with pidfd_getfd: it makes itself non-dumpable.
Nothing it says is trusted by the worker beyond this box: the worker signals and
sweeps only through it, and kills the box itself from outside.
"""

from __future__ import annotations

import array
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

_SWEEP_ROUNDS = 20


def _undumpable() -> None:
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    except (OSError, AttributeError, ImportError):
        pass


class Agent:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.lock = threading.Lock()
        self.fds: list[int] = []

    def send(self, obj: dict) -> None:
        data = (json.dumps(obj) + "\n").encode()
        with self.lock:
            try:
                self.sock.sendall(data)
            except OSError:
                os._exit(0)  # the worker is gone: so is the box

    def messages(self):
        buf = b""
        space = socket.CMSG_SPACE(64 * array.array("i").itemsize)
        while True:
            data, ancdata, _, _ = self.sock.recvmsg(65536, space)
            for level, kind, payload in ancdata:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds = array.array("i")
                    fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
                    self.fds.extend(fds)
            if not data:
                return
            buf += data
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                yield json.loads(line)

    def spawn(self, msg: dict) -> None:
        fds, self.fds = self.fds[:3], self.fds[3:]
        try:
            proc = subprocess.Popen(
                msg["argv"],
                stdin=fds[0],
                stdout=fds[1],
                stderr=fds[2],
                env=msg["env"],
                cwd=msg.get("cwd"),
                start_new_session=True,  # its own group: signals reach what it spawns
                close_fds=True,
            )
        except OSError as e:
            self.send({"id": msg["id"], "error": e.strerror or str(e), "errno": e.errno or 0})
            return
        except (ValueError, TypeError) as e:
            self.send({"id": msg["id"], "error": str(e), "errno": 0})
            return
        finally:
            for fd in fds:
                os.close(fd)
        self.send({"id": msg["id"], "pid": proc.pid})
        threading.Thread(target=self._reap, args=(proc,), daemon=True).start()

    def _reap(self, proc: subprocess.Popen) -> None:
        self.send({"exit": proc.pid, "code": proc.wait()})

    def signal(self, msg: dict) -> None:
        try:
            os.killpg(int(msg["pid"]), int(msg["sig"]))
        except (ProcessLookupError, PermissionError):
            pass
        self.send({"id": msg["id"], "ok": True})

    def sweep(self, msg: dict) -> None:
        me = os.getpid()
        for _ in range(_SWEEP_ROUNDS):
            left = []
            for name in os.listdir("/proc"):
                if not name.isdigit() or int(name) in (1, me):
                    continue
                try:
                    with open(f"/proc/{name}/stat") as f:
                        if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                            continue
                except (OSError, IndexError):
                    continue
                left.append(int(name))
            if not left:
                self.send({"id": msg["id"], "clean": True})
                return
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.05)
        self.send({"id": msg["id"], "clean": False})


def _rlimits(spec: str) -> None:
    """Bounds this agent and so every process of the box: "nproc=512,fsize=N,data=N"
    (RLIMIT_NPROC counts this box's own user namespace, so other boxes and the worker
    do not add up; a harness cannot raise a hard limit)."""
    import resource

    names = {"nproc": "RLIMIT_NPROC", "fsize": "RLIMIT_FSIZE", "data": "RLIMIT_DATA"}
    for item in filter(None, spec.split(",")):
        name, _, value = item.partition("=")
        resource.setrlimit(getattr(resource, names[name]), (int(value), int(value)))


def main() -> int:
    _undumpable()
    if len(sys.argv) > 2:
        _rlimits(sys.argv[2])
    fd = int(sys.argv[1])
    os.set_inheritable(fd, False)
    sock = socket.socket(fileno=fd)
    agent = Agent(sock)
    agent.send({"ready": True})
    handlers = {"spawn": agent.spawn, "signal": agent.signal, "sweep": agent.sweep}
    for msg in agent.messages():
        handlers[msg["op"]](msg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
