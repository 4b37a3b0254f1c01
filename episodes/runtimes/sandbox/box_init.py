"""The sandbox's in-box agent: starts, signals and sweeps processes on the worker's behalf.

No imports from this package, and only modules built into the interpreter or next to
it (no `subprocess`, `threading`, `json`, `socket`, `signal`: their imports cost more
than the interpreter's own start): bubblewrap runs it inside the box as
`python -I -S sandbox_init.py` (pid 2; bwrap's own reaper is pid 1), so a box's start
costs an interpreter's bare start and no more. Every process of the box is its child,
so all of them share the box's namespaces (the relay's loopback port is the harness's
loopback port), and the whole box dies with bwrap's pid 1.

Where the worker has a C compiler, the box runs `box_init.c` instead (compiled
once per worker process, `sandbox.agent`): the same agent and protocol, without an
interpreter's start.

The worker talks to it over one Unix stream socket (the fd named by its argument).
Worker to box: frames of a 4-byte big-endian length and a body of NUL-terminated
fields (trivial to read in C as in Python):

    spawn ID CWD ARGC ARGV... ENVC NAME=VALUE...
        with SCM_RIGHTS on the frame's first byte: the process's stdin, stdout, stderr
    signal ID PID SIG      killpg(PID, SIG)
    sweep ID               SIGKILL all but pid 1 and this agent

Box to worker: newline-delimited JSON (the worker trusts nothing from the box and
parses it as such):

    {"ready": true}                                 once, at start
    {"id": N, "pid": P} | {"id": N, "error": "...", "errno": E}
    {"id": N, "ok": true} | {"id": N, "clean": bool}
    {"exit": P, "code": C}        a child ended (C < 0: signal -C)

Children are reaped on SIGCHLD (through a wakeup pipe in the one loop), not by a
thread each.

Hazard: the harness runs as the same user in the same box and could kill this agent
(its box then ends: a harness that does so only crashes its own session) or, were
it dumpable, take its socket over with pidfd_getfd: it makes itself non-dumpable.
Nothing it says is trusted by the worker beyond this box: the worker signals and
sweeps only through it, and kills the box itself from outside.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]
import _socket
import os
import select
import sys
import time

_SWEEP_ROUNDS = 20
_FDS_MAX = 64
_INT = 4  # sizeof(int): the SCM_RIGHTS payload is an array of them
_FRAME_MAX = 16 * 1024 * 1024
# A command without PATH in its environment: the same as the compiled agent's (and the
# worker's `MINIMAL_PATH`), not `os.defpath`.
_DEFAULT_PATH = b"/usr/local/bin:/usr/bin:/bin"


def _undumpable() -> None:
    """prctl(PR_SET_DUMPABLE, 0) through `_ctypes` (the `ctypes` package costs a third
    of an interpreter's start), else `ctypes`."""
    try:
        import _ctypes

        class _Int(_ctypes._SimpleCData):
            _type_ = "i"

        class _Fn(_ctypes.CFuncPtr):
            _flags_ = _ctypes.FUNCFLAG_CDECL
            _restype_ = _Int

        class _Self:
            _handle = _ctypes.dlopen(None)  # type: ignore[arg-type]

        if _Fn(("prctl", _Self()))(4, 0, 0, 0, 0) == 0:  # type: ignore[arg-type]  # PR_SET_DUMPABLE, 0
            return
    except Exception:
        pass
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
    except (OSError, AttributeError, ImportError):
        pass


def _text(value: object) -> str:
    """A JSON string of `value` (the few messages this agent writes need no more)."""
    s = str(value)[:500]
    return '"' + "".join(c if c.isprintable() and c not in '"\\' else " " for c in s) + '"'


def _exit_code(status: int) -> int:
    return os.waitstatus_to_exitcode(status)


class Agent:
    def __init__(self, sock: _socket.socket) -> None:
        self.sock = sock
        self.fds: list[int] = []
        self.buf = b""

    def send(self, line: str) -> None:
        try:
            self.sock.sendall((line + "\n").encode())
        except OSError:
            os._exit(0)  # the worker is gone: so is the box

    def receive(self) -> list[list[bytes]]:
        """The whole frames read by one recvmsg; [] when none is complete yet.
        Raises EOFError when the worker closed the socket."""
        space = _socket.CMSG_SPACE(_FDS_MAX * _INT)
        data, ancdata, _, _ = self.sock.recvmsg(65536, space)
        for level, kind, payload in ancdata:
            if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
                n = len(payload) // _INT
                self.fds += [
                    int.from_bytes(payload[i * _INT : (i + 1) * _INT], sys.byteorder, signed=True)
                    for i in range(n)
                ]
        if not data:
            raise EOFError
        self.buf += data
        out = []
        while len(self.buf) >= 4:
            size = int.from_bytes(self.buf[:4], "big")
            if size > _FRAME_MAX:
                raise EOFError
            if len(self.buf) < 4 + size:
                break
            body = self.buf[4 : 4 + size]
            if body.endswith(b"\0"):
                out.append(body[:-1].split(b"\0"))
            self.buf = self.buf[4 + size :]
        return out

    def spawn(self, msg: list[bytes]) -> None:
        fds, self.fds = self.fds[:3], self.fds[3:]
        rid = int(msg[1])
        try:
            pid = self._fork_exec(msg, fds)
        except OSError as e:
            error = _text(e.strerror or e)
            self.send(f'{{"id": {rid}, "error": {error}, "errno": {int(e.errno or 0)}}}')
            return
        except (ValueError, TypeError, KeyError, IndexError) as e:
            self.send(f'{{"id": {rid}, "error": {_text(e)}, "errno": 0}}')
            return
        finally:
            for fd in fds:
                os.close(fd)
        self.send(f'{{"id": {rid}, "pid": {pid}}}')

    def _fork_exec(self, msg: list[bytes], fds: list[int]) -> int:
        # spawn ID CWD ARGC ARGV... ENVC NAME=VALUE...
        cwd, argc = msg[2], int(msg[3])
        argv, envc = msg[4 : 4 + argc], int(msg[4 + argc])
        pairs = msg[5 + argc :]
        if not argv or len(argv) != argc or len(pairs) != envc or len(fds) != 3:
            raise ValueError("bad spawn request")
        env = dict(p.partition(b"=")[::2] for p in pairs)
        if b"/" in argv[0]:
            paths = [argv[0]]
        else:
            dirs = env.get(b"PATH", _DEFAULT_PATH).split(b":")
            paths = [os.path.join(d or b".", argv[0]) for d in dirs]
        r, w = os.pipe()  # close-on-exec: EOF on it says the exec happened
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child, until it execs
            code, text = 0, b"cannot start"
            try:
                os.close(r)
                os.setsid()  # its own group: signals reach what it spawns
                for n, fd in enumerate(fds):
                    os.dup2(fd, n)
                os.closerange(3, w)
                os.closerange(w + 1, os.sysconf("SC_OPEN_MAX"))
                for sig in (_signal.SIGPIPE, _signal.SIGXFSZ, _signal.SIGCHLD):
                    _signal.signal(sig, _signal.SIG_DFL)
                if cwd:
                    os.chdir(cwd)
                for path in paths:
                    try:
                        os.execve(path, argv, env)
                    except OSError as e:
                        if code == 0 or code in (2, 20):  # ENOENT, ENOTDIR: try the next
                            code, text = e.errno or 0, (e.strerror or str(e)).encode()
            except OSError as e:
                code, text = e.errno or 0, (e.strerror or str(e)).encode()
            except BaseException as e:
                code, text = 0, str(e).encode()
            try:
                os.write(w, b"%d:" % code + text)
            finally:
                os._exit(127)
        os.close(w)
        try:
            failed = b""
            while chunk := os.read(r, 4096):
                failed += chunk
        finally:
            os.close(r)
        if failed:
            os.waitpid(pid, 0)
            number, _, text = failed.partition(b":")
            raise OSError(int(number or 0), text.decode(errors="replace"))
        return pid

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.send(f'{{"exit": {pid}, "code": {_exit_code(status)}}}')

    def signal(self, msg: list[bytes]) -> None:
        try:
            os.killpg(int(msg[2]), int(msg[3]))
        except (ProcessLookupError, PermissionError):
            pass
        self.send(f'{{"id": {int(msg[1])}, "ok": true}}')

    def sweep(self, msg: list[bytes]) -> None:
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
                self.send(f'{{"id": {int(msg[1])}, "clean": true}}')
                return
            for pid in left:
                try:
                    os.kill(pid, 9)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.05)
        self.send(f'{{"id": {int(msg[1])}, "clean": false}}')


def _rlimits(spec: str) -> None:
    """Bounds this agent and so every process of the box: "nproc=512,fsize=N,nofile=N,data=N"
    (RLIMIT_NPROC counts this box's own user namespace, so other boxes and the worker
    do not add up; a harness cannot raise a hard limit)."""
    import resource

    names = {
        "nproc": "RLIMIT_NPROC",
        "fsize": "RLIMIT_FSIZE",
        "nofile": "RLIMIT_NOFILE",
        "data": "RLIMIT_DATA",
    }
    for item in filter(None, spec.split(",")):
        name, _, value = item.partition("=")
        resource.setrlimit(getattr(resource, names[name]), (int(value), int(value)))


def main() -> int:
    _undumpable()
    if len(sys.argv) > 2:
        _rlimits(sys.argv[2])
    fd = int(sys.argv[1])
    os.set_inheritable(fd, False)
    sock = _socket.socket(fileno=fd)
    agent = Agent(sock)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    _signal.signal(_signal.SIGCHLD, lambda *_: None)
    _signal.set_wakeup_fd(wake_w)
    agent.send('{"ready": true}')
    handlers = {b"spawn": agent.spawn, b"signal": agent.signal, b"sweep": agent.sweep}
    while True:
        readable, _, _ = select.select([fd, wake_r], [], [])
        if wake_r in readable:
            try:
                while os.read(wake_r, 512):
                    pass
            except BlockingIOError:
                pass
            agent.reap()
        if fd in readable:
            try:
                messages = agent.receive()
            except (EOFError, ConnectionError):
                return 0
            for msg in messages:
                if len(msg) >= 2 and msg[0] in handlers:
                    handlers[msg[0]](msg)


if __name__ == "__main__":
    sys.exit(main())
