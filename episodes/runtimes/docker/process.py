"""One process in a Docker box: an exec with stdin attached, streams demultiplexed.

Its stdout and stderr come multiplexed on one hijacked socket (8-byte frame headers:
stream type, size); a reader thread splits them into two `process_io` streams, and
stops reading (like a full pipe) while a stream holds too much unread data.

Signals: the exec API cannot signal an exec, so each process is started through
`sh -c 'trap : TERM; echo $$ >&2; "$@"; exit $?'` (WRAPPER): its first stderr line is
the shell's pid inside the container, and since runc makes every exec a session
leader that pid is also the session and process group of the shell and the program. terminate()/kill() signal
that tree (TREE_KILLER) in a second exec, which also works against a remote engine
(a host pid would not); kill() after the leader exited sweeps what it left behind, once.

The shell stays, as the program's parent, rather than exec'ing it: the parent of an
exec'd process is `runc exec`, which exits as soon as the process has started, and
Linux sends a process's PR_SET_PDEATHSIG when the thread that made it exits. A
harness that asks to die with its parent (`sdk.serve` does, as docs/protocol.md
advises) was SIGKILLed at start whenever it asked before runc had exited; its
parent is now the shell, which lives exactly as long as it does: it traps SIGTERM
(a handler, which the program does not inherit, unlike an ignored signal) and so
outlives a program that ignores it; it exits with the program's status.

Exit codes: the engine reports a signalled exec as 128+n, like a shell does (see
`process_io.exit_code`). A process whose container was removed under it reports -9.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import socket
import struct
import threading
from typing import Any, Protocol

from episodes.runtimes.docker.engine import call, call_stdin, docker
from episodes.runtimes.process_io import HIGH_WATER, BufferedStream, StreamedProcess, exit_code

log = logging.getLogger(__name__)

# Wraps every command: report the pid first, then run the program as the shell's
# child and exit with its status (a signal's as 128+n); see above for why not exec.
WRAPPER = ["/bin/sh", "-c", 'trap : TERM; echo "$$" >&2; "$@"; exit $?', "sh"]
_FRAME = struct.Struct(">BxxxL")
_CHUNK = 64 * 1024
# $1: signal name, $2: the exec's pid, which runc made a session (and group) leader.
# Signals the exec's tree: its session, its group, and their descendants (a child that
# called setsid). After the leader exited its orphans stay in its session and group,
# so this still finds them; pid 1 (docker's init) and this shell are never members.
TREE_KILLER = r"""s=$1 l=$2 n=0
while [ "$n" -lt 3 ]; do
  m=" "
  while :; do
    more=
    for f in /proc/[0-9]*/stat; do
      p=${f#/proc/}; p=${p%/stat}
      case "$m" in *" $p "*) continue;; esac
      [ "$p" = 1 ] || [ "$p" = $$ ] && continue
      read -r line <"$f" 2>/dev/null || continue
      set -- ${line##*") "}
      [ "$1" = Z ] && continue
      case "$m" in *" $2 "*) ;; *) [ "$3" = "$l" ] || [ "$4" = "$l" ] || continue;; esac
      m="$m$p "; more=1
    done
    [ -n "$more" ] || break
  done
  [ "$m" = " " ] && exit 0
  kill -s "$s" $m 2>/dev/null
  [ "$s" = KILL ] || exit 0
  n=$((n+1))  # a member may have forked meanwhile: look again
done
exit 0
"""
_PID_WAIT_S = 30.0
_SLOW_POLL_S = 5.0
_LOST_AFTER_S = 60.0


def _buffered_read(sock: Any) -> Any:
    """`read1` of the buffered reader the HTTP upgrade's response was parsed from.

    The engine may send the first frames in the same packet as its `101` response; the
    SDK's HTTP parsing then holds them in that reader's buffer, and reading the raw
    socket loses them: a short command's whole output (its pid line too: "the process
    could not start", 2 of 300 `echo`s on a loaded machine here). One `read1` returns
    all the buffered bytes (the buffer is smaller than a read), or reads the socket as
    `recv` does when there are none; later reads go to the socket itself, so nothing
    of the SDK's response objects (which may be closed under us) is used after that.
    None where the SDK's objects are not the expected ones (the raw socket is then all
    there is)."""
    response = getattr(sock, "_response", None)
    reader = getattr(getattr(getattr(response, "raw", None), "_fp", None), "fp", None)
    return reader.read1 if isinstance(reader, io.BufferedReader) else None


class _Pipe(BufferedStream):
    """One demultiplexed stream. The reader thread counts what it fed in `pending` and
    waits on `flow` while that is past the high-water mark; reads count it down."""

    def __init__(self, name: str, flow: threading.Condition, *, header: bool = False) -> None:
        super().__init__(name, header=header)
        self._flow = flow
        self.pending = 0  # bytes fed but not yet read; guarded by `flow`

    def _consumed(self, n: int) -> None:
        with self._flow:
            self.pending -= n
            self._flow.notify_all()


class Container(Protocol):
    """What a process needs of its box (a `DockerRuntime`)."""

    name: str
    api: Any

    @property
    def stopped(self) -> bool: ...

    async def exec_quiet(self, cmd: list[str]) -> int | None: ...


class DockerProcess(StreamedProcess):
    """One exec in the box; stdout/stderr demultiplexed from its attached socket."""

    def __init__(self, runtime: Container, exec_id: str, sock: Any) -> None:
        self._runtime = runtime
        self._exec_id = exec_id
        self._io = sock  # keeps the SDK's SocketIO (and so the socket) open
        self._sock: socket.socket = getattr(sock, "_sock", sock)
        # The SDK left its API timeout on this socket: a harness silent that long (a
        # long model call, a user between turns) would read as exited. Block instead;
        # the engine ends the stream when the process ends or the box goes.
        self._sock.settimeout(None)
        # The first read only: what the SDK's HTTP parser holds (see _buffered_read).
        self._first_read = _buffered_read(sock) or self._sock.recv
        self._loop = asyncio.get_running_loop()
        self._flow = threading.Condition()
        # stderr starts with the wrapper's pid line
        super().__init__(_Pipe("stdout", self._flow), _Pipe("stderr", self._flow, header=True))
        self._eof = asyncio.Event()
        self._closed = False  # the socket has ended; nothing more can be written
        self._stdin_closed = False
        self._swept = False  # the tree was SIGKILLed after the leader exited: never again
        self._wait_task: asyncio.Future[int] | None = None
        self._write_lock = asyncio.Lock()
        threading.Thread(target=self._pump, name=f"docker-exec-{exec_id[:8]}", daemon=True).start()

    # -- reader thread -------------------------------------------------------------------
    def _pump(self) -> None:
        buf = bytearray()
        try:
            data = self._first_read(_CHUNK)
            while data:
                buf += data
                while len(buf) >= _FRAME.size:
                    kind, size = _FRAME.unpack_from(buf)
                    if len(buf) < _FRAME.size + size:
                        break
                    payload = bytes(buf[_FRAME.size : _FRAME.size + size])
                    del buf[: _FRAME.size + size]
                    self._deliver(kind, payload)
                data = self._sock.recv(_CHUNK)
        except (OSError, ValueError, RuntimeError):
            pass  # the socket was closed under us, or the loop is gone
        finally:
            # shutdown() (unlike close()) also wakes a write blocked in another thread.
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                self._sock.close()
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._on_eof)

    def _deliver(self, kind: int, data: bytes) -> None:
        pipe = self._out if kind == 1 else self._err  # 3 is the engine's own error text
        if not data:
            return
        with self._flow:
            # Once the box is stopped nobody may read any more: drain to EOF instead.
            while pipe.pending > HIGH_WATER and not self._runtime.stopped:
                self._flow.wait(0.5)
            pipe.pending += len(data)
        self._loop.call_soon_threadsafe(pipe.feed, data)

    # -- event loop side -------------------------------------------------------------------
    def _on_eof(self) -> None:
        self._closed = True
        self._out.feed_eof()
        self._err.feed_eof()
        self._eof.set()

    async def wait_started(self) -> None:
        """Return once the process runs; raise OSError if the engine could not start it."""
        try:
            line = await asyncio.wait_for(asyncio.shield(self._err.header), _PID_WAIT_S)
        except TimeoutError:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
            raise RuntimeError(f"process did not start within {_PID_WAIT_S:.0f}s") from None
        if line is not None and line.strip().isdigit():
            self._pid = int(line)
        else:
            # The engine failed before our shell ran (bad cwd, ...): its message is on stdout.
            text = (await self._out.read()).decode(errors="replace").strip()
            await self.wait()
            raise OSError(text or f"the process could not start (exit code {self.returncode})")

    _out: _Pipe
    _err: _Pipe

    async def write(self, data: bytes) -> None:
        async with self._write_lock:
            if self._closed or self._stdin_closed or self._exit.done():
                raise BrokenPipeError("the process has exited; its stdin is closed")
            try:
                await call_stdin(self._sock.sendall, data)
            except OSError as e:
                raise BrokenPipeError(f"stdin of the process is closed: {e}") from e

    async def close_stdin(self) -> None:
        # Not behind the write lock: a write stuck on a process that never reads must
        # not block the EOF (shutdown() does not block; the stuck write then fails).
        if not self._stdin_closed and not self._closed:
            self._stdin_closed = True
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_WR)

    async def wait(self) -> int:
        if self._exit.done():
            return self._exit.result()
        if self._wait_task is None:
            self._wait_task = asyncio.ensure_future(self._poll_exit())
        return await asyncio.shield(self._wait_task)

    async def _poll_exit(self) -> int:
        api = self._runtime.api
        delay, lost_since = 0.02, None
        while True:
            if not self._eof.is_set():
                # The engine ends the stream when the process exits: waiting on it costs
                # nothing, so inspect only rarely before that (thousands of boxes).
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._eof.wait(), _SLOW_POLL_S)
            try:
                info = await call(api.exec_inspect, self._exec_id)
            except docker.errors.NotFound:  # the container (and its execs) were removed
                return self._set_exit(-9)
            except Exception as e:  # engine unreachable: retry for a while, then give up
                lost_since = lost_since or asyncio.get_running_loop().time()
                if asyncio.get_running_loop().time() - lost_since > _LOST_AFTER_S:
                    log.warning("lost track of a process in %s: %s", self._runtime.name, e)
                    return self._set_exit(-9)
            else:
                lost_since = None
                if not info["Running"] and info["ExitCode"] is not None:
                    return self._set_exit(exit_code(info["ExitCode"]))
            if self._eof.is_set():
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.5)

    async def _signal(self, sig: str) -> None:
        if self._swept or self._pid is None or self._runtime.stopped:
            return
        if self._exit.done():
            if sig != "KILL":
                return
            # One SIGKILL sweep of what the leader left behind (issue 11): once only,
            # since its pid may be reused by an unrelated process later.
            self._swept = True
        cmd = ["/bin/sh", "-c", TREE_KILLER, "sh", sig, str(self._pid)]
        with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
            await self._runtime.exec_quiet(cmd)

    async def terminate(self) -> None:
        await self._signal("TERM")

    async def kill(self) -> None:
        await self._signal("KILL")
