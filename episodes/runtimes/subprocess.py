"""The subprocess runtime: the "box" is the worker machine itself, plus a private workdir.

Every process gets its own session and process group (`start_new_session=True`), so a
signal to the group reaches whatever the harness spawned. Children are also asked to
die with the worker (`PR_SET_PDEATHSIG=SIGKILL`): Linux fires it when the *thread*
that forked the child exits. asyncio forks from the event-loop thread, which lives
as long as the worker does; do not open processes from a short-lived thread's loop.

The death signal is set by exec'ing through util-linux's `setpriv --pdeathsig KILL`,
not by Python code between fork and exec: a worker has threads (the Temporal core,
asyncio's child watchers), and running Python in a forked child of a threaded
process can deadlock on a lock another thread held at fork time — and asyncio's
fork blocks the event loop until the child execs, so that froze a whole worker in
a 1,000-session benchmark. Without `setpriv` (not Linux, a minimal image) the old
`preexec_fn` route is the fallback.

The environment is an allowlist: a process sees exactly the `env` it is given (API
keys and tokens of the worker do not leak in). Only if that env has no PATH, a
minimal one is added so that `python3` and friends resolve.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import shutil
import signal
import sys
import tempfile
import uuid
from pathlib import Path

from episodes.runtimes.base import ByteStream, Runtime, RuntimeProcess, end_processes
from episodes.runtimes.host_dirs import box_dir_prefix
from episodes.types.runtime import SubprocessConfig

MINIMAL_PATH = "/usr/local/bin:/usr/bin:/bin"
_KILL_WAIT_S = 5.0
_STREAM_LIMIT = 64 * 1024  # per-pipe buffer before asyncio stops reading (backpressure)
_PR_SET_PDEATHSIG = 1


def _load_prctl():
    # Resolved before any fork: loading a library in the forked child is not safe.
    if sys.platform != "linux":
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_prctl = _load_prctl()
SETPRIV = shutil.which("setpriv") if sys.platform == "linux" else None


def _child_setup(parent_pid: int) -> None:
    """Runs in the child between fork and exec."""
    if _prctl is None:
        return
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


def _check_executable(program: str, path: str, cwd: str) -> None:
    if os.sep in program:
        candidate = os.path.join(cwd, program)
        if os.access(candidate, os.X_OK) and not os.path.isdir(candidate):
            return
    elif shutil.which(program, path=path):
        return
    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)


class _Protocol(asyncio.subprocess.SubprocessStreamProtocol):
    """Notes the moment the process exits.

    `Process.wait()` of recent Pythons (3.11.7 included) also waits for every pipe to
    close, which a grandchild holding stdout, or a pipe nobody reads, can delay
    forever. `wait()` here means exactly "the process exited".
    """

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=limit, loop=loop)
        self.exited: asyncio.Future[None] = loop.create_future()

    def process_exited(self) -> None:
        super().process_exited()
        if not self.exited.done():
            self.exited.set_result(None)


class SubprocessProcess(RuntimeProcess):
    def __init__(
        self,
        proc: asyncio.subprocess.Process,
        transport: asyncio.SubprocessTransport,
        protocol: _Protocol,
    ) -> None:
        self._proc = proc
        self._transport = transport
        self._protocol = protocol
        self._pgid = proc.pid  # leader of its own session, so pgid == pid
        self._swept = False  # group SIGKILLed after the leader exited: never signal it again

    @property
    def stdout(self) -> ByteStream:
        assert self._proc.stdout is not None  # opened with stdout=PIPE
        return self._proc.stdout

    @property
    def stderr(self) -> ByteStream:
        assert self._proc.stderr is not None  # opened with stderr=PIPE
        return self._proc.stderr

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode

    @property
    def finished(self) -> bool:
        """The leader exited and its group was swept: nothing of it is left to stop."""
        return self._swept

    async def write(self, data: bytes) -> None:
        stdin = self._proc.stdin
        if stdin is None or stdin.is_closing() or self._proc.returncode is not None:
            raise BrokenPipeError(f"stdin of process {self._proc.pid} is closed")
        stdin.write(data)
        await stdin.drain()

    async def close_stdin(self) -> None:
        stdin = self._proc.stdin
        if stdin is None or stdin.is_closing():
            return
        stdin.close()
        with contextlib.suppress(ConnectionError, BrokenPipeError):
            await stdin.wait_closed()

    async def wait(self) -> int:
        await asyncio.shield(self._protocol.exited)
        code = self._proc.returncode
        assert code is not None
        return code

    def release(self) -> None:
        """Close our ends of the pipes (kills the process if it still runs)."""
        self._transport.close()

    def _signal_group(self, sig: int) -> None:
        # After the leader exits, the group may still hold processes it spawned: signal
        # them too, once. Signalling an old group later could hit a reused pgid.
        if self._swept:
            return
        if self._proc.returncode is not None:
            if os.path.exists(f"/proc/{self._pgid}"):
                # The leader is reaped, yet a process has its pid. The kernel hands out
                # no pid that is still a group's id, so ours are all gone and a group of
                # that id is another's (another box's, a `docker exec`'s): never signal it.
                self._swept = True
                return
            if sig == signal.SIGKILL:
                self._swept = True
        try:
            os.killpg(self._pgid, sig)
        except ProcessLookupError:
            self._swept = self._proc.returncode is not None
        except PermissionError:
            # The group is gone and its id was reused by someone else's process.
            self._swept = True

    async def terminate(self) -> None:
        self._signal_group(signal.SIGTERM)

    async def kill(self) -> None:
        self._signal_group(signal.SIGKILL)


class SubprocessRuntime(Runtime):
    """Processes on the worker machine, each in its own process group."""

    shares_host_loopback = True
    # The worker's own interpreter and this checkout: the "box" is the worker's machine.
    box_python = sys.executable
    box_episodes = str(Path(__file__).resolve().parents[2])

    def __init__(self, config: SubprocessConfig | None = None) -> None:
        self.config = config or SubprocessConfig()
        self.id = uuid.uuid4().hex[:12]
        self.workdir: str | None = None
        self._procs: list[SubprocessProcess] = []
        self._started = False

    async def start(self) -> None:
        if self._stopped:
            raise RuntimeError(f"subprocess runtime {self.id} was stopped; create a new one")
        if not self._started:
            # Named by this worker's pid, as a sandbox box's are: a dead worker's are reaped
            # at the next worker's start (`host_dirs.reap_dead_dirs`).
            self.workdir = tempfile.mkdtemp(prefix=f"{box_dir_prefix()}{self.id}-")
            self._started = True

    async def alive(self) -> bool:
        return self._started and not self._stopped

    async def open_process(
        self,
        argv: list[str],
        env: dict[str, str] | None = None,
        cwd: str | None = None,
    ) -> SubprocessProcess:
        if not await self.alive():
            raise RuntimeError(f"subprocess runtime {self.id} is not running")
        if not argv:
            raise ValueError("argv must not be empty")
        assert self.workdir is not None  # set by start(), and alive() says it ran
        workdir = cwd or self.workdir
        child_env = dict(env or {})
        child_env.setdefault("PATH", MINIMAL_PATH)
        parent_pid = os.getpid()
        loop = asyncio.get_running_loop()
        # What asyncio.create_subprocess_exec does, with a protocol that reports exit.
        if SETPRIV:
            # Fail like a direct exec would, rather than as setpriv's exit code 127.
            _check_executable(argv[0], child_env["PATH"], workdir)
            argv = [SETPRIV, "--pdeathsig", "KILL", "--", *argv]
        transport, protocol = await loop.subprocess_exec(
            lambda: _Protocol(_STREAM_LIMIT, loop),
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=child_env,
            cwd=workdir,
            start_new_session=True,
            preexec_fn=None if SETPRIV else (lambda: _child_setup(parent_pid)),
        )
        proc = asyncio.subprocess.Process(transport, protocol, loop)
        process = SubprocessProcess(proc, transport, protocol)
        # Long-lived (pooled) boxes open many processes: forget the fully stopped ones.
        self._procs = [p for p in self._procs if not p.finished]
        self._procs.append(process)
        return process

    async def sweep(self) -> bool:
        procs = list(self._procs)
        await end_processes(procs, _KILL_WAIT_S)
        self._procs = [p for p in self._procs if not p.finished]
        return not self._procs

    async def _teardown(self) -> None:
        procs, self._procs = self._procs, []
        await end_processes(procs, _KILL_WAIT_S)
        for p in procs:
            p.release()
        if self.workdir is not None:
            await asyncio.to_thread(shutil.rmtree, self.workdir, True)
