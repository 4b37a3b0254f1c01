"""The default local runtime: a bubblewrap sandbox per box (docs/containment.md).

One `bwrap` per box holds the box's namespaces: its own user, pid, network (only its
own loopback), ipc, uts and cgroup namespaces, a root of read-only binds (the system,
the worker's Python, the `episodes` package, the spec's `ro_paths`), a private
writable workdir and /tmp. Inside it runs `sandbox.box_init` (pid 2, bwrap's reaper is
pid 1), and every process of the box is that agent's child: the worker sends it the
argv, env and the three pipe ends over a Unix socket (see `sandbox.box_init`). So a
harness and the relays that serve its tool bridge and model proxy share one loopback,
and the worker keeps plain pipes to each process, as with a local process.

Killing the box is killing bwrap: `--die-with-parent` SIGKILLs its pid 1 with it, and
the kernel ends every process of a pid namespace whose pid 1 dies, `setsid` daemons
included. bwrap itself dies with the worker (`--die-with-parent` again: the death
signal of the event-loop thread that forked it, see `subprocess`).

A box lost (`box_lost`, a failover) is one whose bwrap was killed by a signal while
nobody here ended it (not stop(), not the limit watch): an operator, a supervisor,
a kill of the worker's process group that spared the worker. No process of the box
can signal bwrap (it is outside the box's pid namespace), and bwrap itself never dies
of a signal by its own doing: when its pid 1 or the agent dies, it exits with 128+n.
That exit is not told apart (a harness can kill the agent, its own box's pid 2), so it
stays the harness's crash (docs/failures.md).

The session's services reach the box as for Docker: Unix sockets in a private host
directory bound read-only at /run/episodes, and an in-box relay per socket (the
worker's `episodes/tunnel/relay.py`, bound where the Docker image keeps it).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import shutil
import signal
import socket
import sys
import tempfile
import uuid
from pathlib import Path

from episodes.errors import RuntimeUnavailable, SpecError
from episodes.runtimes.base import OPEN_FILES, Runtime, RuntimeProcess
from episodes.runtimes.host_dirs import box_dir_prefix
from episodes.runtimes.sandbox import agent as sandbox_agent
from episodes.runtimes.sandbox import cgroup, cgroup_pool, seccomp
from episodes.runtimes.sandbox import etc as box_etc
from episodes.runtimes.sandbox.agent import AGENT_IN_BOX
from episodes.runtimes.sandbox.bwrap import (
    BWRAP_MISSING,
    CHANNEL_IN_BOX,
    MINIMAL_PATH,
    bwrap_argv,
    bwrap_path,
    command_files,
    sandbox_problem,
    sized_tmpfs,
)
from episodes.runtimes.sandbox.channel import AgentChannel
from episodes.runtimes.sandbox.limits import LimitWatch
from episodes.runtimes.sandbox.process import SandboxProcess
from episodes.runtimes.subprocess import SETPRIV

__all__ = [
    "BWRAP_MISSING",
    "SandboxProcess",
    "SandboxRuntime",
    "bwrap_argv",
    "bwrap_path",
    "command_files",
    "local_runtime",
    "sandbox_problem",
]
from episodes.types.runtime import SubprocessConfig

_READY_TIMEOUT_S = 30.0


class SandboxRuntime(AgentChannel, Runtime):
    """A bubblewrap sandbox on the worker's machine; every process a child of its agent."""

    # `{python}` is the worker's interpreter, as for a plain subprocess box.
    box_python = sys.executable

    def __init__(self, config: SubprocessConfig | None = None) -> None:
        super().__init__()
        self.config = config or SubprocessConfig()
        self.id = uuid.uuid4().hex[:12]
        self.workdir: str | None = None
        self._channel: str | None = None
        self._bwrap: asyncio.subprocess.Process | None = None
        self._start_task: asyncio.Future[None] | None = None
        self.argv: list[str] = []
        self._watch: LimitWatch | None = None
        self._host_workdir = False
        self._agent: str | None = None  # the compiled agent it runs (`sandbox.agent`)

    @property
    def channel_dir(self) -> tuple[Path, str] | None:
        return (Path(self._channel), CHANNEL_IN_BOX) if self._channel else None

    @property
    def bwrap_pid(self) -> int | None:
        """The host pid of the box's bwrap (through setpriv, which execs it)."""
        return self._bwrap.pid if self._bwrap is not None else None

    def kill_bwrap(self) -> None:
        """Kills the box's bwrap, and with it every process of the box (`LimitWatch`)."""
        bwrap = self._bwrap
        if bwrap is not None and bwrap.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                bwrap.kill()

    async def open_relay(self, argv: list[str]) -> RuntimeProcess:
        # The compiled agent relays too (`box_init.c`: no interpreter to start, two
        # a session with tools and a model); else the relay runs on the worker's Python,
        # bound in (a box may have no python3).
        socket_path = _option(argv, "--socket")
        if (
            self._agent is not None
            and socket_path is not None
            and argv[-2:] == ["--socket", socket_path]
        ):
            return await self.open_process([AGENT_IN_BOX, "--relay", socket_path], {}, None)
        return await self.open_process([sys.executable, *argv[1:]] if argv else argv, {}, None)

    async def start(self) -> None:
        if self._stopped:
            raise RuntimeError(f"sandbox runtime {self.id} was stopped; create a new one")
        if self._start_task is None:
            self._start_task = asyncio.ensure_future(self._start())
        await asyncio.shield(self._start_task)

    async def _start(self) -> None:
        bwrap = bwrap_path()
        if bwrap is None:
            raise RuntimeUnavailable(BWRAP_MISSING)
        missing = [p for p in self.config.ro_paths if not os.path.exists(p)]
        if missing:
            raise SpecError(f"harness.runtime.ro_paths: {missing[0]} does not exist on this worker")
        limits = self.config.limits
        # The box's workdir and /tmp are one tmpfs of `limits.disk` inside the box (so
        # nothing of them is on the host); an old bwrap without --size binds a host one.
        disk = limits.disk if sized_tmpfs(bwrap) else None
        if disk is not None:
            self.workdir = f"/tmp/episodes-{self.id}"
        else:
            self.workdir = tempfile.mkdtemp(prefix=f"{box_dir_prefix()}{self.id}-")
            self._host_workdir = True
        self._channel = tempfile.mkdtemp(prefix=box_dir_prefix())
        # A parked cgroup of an earlier box where one waits (`cgroup_pool`), else a new
        # one, made in a thread (mkdir and writes in cgroupfs).
        group = cgroup_pool.lease(limits) or await asyncio.to_thread(cgroup.make, self.id, limits)
        self._agent = await sandbox_agent.agent_binary()
        # /etc in one bind: copied once per worker (and again when the host's changes);
        # entry by entry where the spec binds something inside /etc (a read-only /etc
        # has no room for its mount point).
        etc: list[str] | None = None
        if not any(p == "/etc" or p.startswith("/etc/") for p in self.config.ro_paths):
            etc = box_etc.etc_binds(copy=False) or await asyncio.to_thread(box_etc.etc_binds)
        # Without a cgroup, rlimits (per process, but a fork bomb stops at nproc).
        nofile = _open_files()
        rlimits = f"nproc={limits.processes},fsize={limits.disk},nofile={nofile}"
        if group is None:
            rlimits += f",data={limits.memory}"
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        filter_fd = seccomp.program_fd()
        self.expect_agent()
        self.argv = bwrap_argv(
            bwrap,
            self.workdir,
            self._channel,
            self.config.ro_paths,
            theirs.fileno(),
            disk=disk,
            seccomp_fd=filter_fd,
            rlimits=rlimits,
            agent=self._agent,
            etc=etc,
        )
        # Dies with the worker, as a subprocess box does (see `subprocess`): bwrap then
        # takes its pid 1, and so the whole box, with it (--die-with-parent).
        if self._agent is not None:  # the agent launches: both in one exec
            files = group.procs_files if group is not None else []
            command = [self._agent, "--launch", str(len(files)), *files, "--", *self.argv]
        else:
            prefix = [SETPRIV, "--pdeathsig", "KILL", "--"] if SETPRIV else []
            command = [*prefix, *self.argv]
            if group is not None:
                command = group.enter_argv(command)
        self._watch = LimitWatch(self, limits, group, disk, nofile)
        fds = (theirs.fileno(),) if filter_fd is None else (theirs.fileno(), filter_fd)
        try:
            self._bwrap = await asyncio.create_subprocess_exec(
                *command,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
                env={},
                start_new_session=True,
                pass_fds=fds,
            )
        finally:
            theirs.close()
            if filter_fd is not None:
                os.close(filter_fd)
        self.attach(ours)
        try:
            await self.agent_ready(_READY_TIMEOUT_S)
        except (TimeoutError, ConnectionError):
            why = await self._bwrap_stderr()
            if why.startswith("bwrap:") and await asyncio.to_thread(sandbox_problem) is None:
                # This machine makes sandboxes: what failed is this box's own setup (a
                # bind of the spec's): no other worker would do better.
                raise SpecError(f"the sandbox did not start: {why}") from None
            raise RuntimeUnavailable(f"the sandbox did not start: {why}") from None
        self._watch.start()

    async def limit_exceeded(self) -> str | None:
        return self._watch.exceeded() if self._watch is not None else None

    async def box_lost(self) -> str | None:
        """bwrap was killed by a signal, not by us (see the module docstring)."""
        bwrap = self._bwrap
        if self._stopped or bwrap is None:
            return None
        code = await _exit_status(bwrap)
        if code is None or code >= 0:
            return None  # it runs (the harness's own exit), or it exited by itself
        if self._watch is not None and self._watch.exceeded() is not None:
            return None  # the limit watch ended it: limit_exceeded
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return (
            f"the sandbox {self.id} was killed from outside (its bwrap, pid {bwrap.pid}, by {name})"
        )

    async def _bwrap_stderr(self) -> str:
        assert self._bwrap is not None and self._bwrap.stderr is not None
        with contextlib.suppress(Exception):
            if self._bwrap.returncode is None:
                self._bwrap.kill()
            data = await asyncio.wait_for(self._bwrap.stderr.read(4096), 5)
            line = data.decode(errors="replace").strip().splitlines()
            return line[-1] if line else f"bwrap exited ({self._bwrap.returncode})"
        return "bwrap did not answer"

    # -- the runtime contract ------------------------------------------------------------
    async def alive(self) -> bool:
        return (
            self.connected
            and not self._stopped
            and self._bwrap is not None
            and self._bwrap.returncode is None
        )

    async def open_process(
        self,
        argv: list[str],
        env: dict[str, str] | None = None,
        cwd: str | None = None,
    ) -> SandboxProcess:
        if not await self.alive():
            raise RuntimeError(f"sandbox runtime {self.id} is not running")
        if not argv:
            raise ValueError("argv must not be empty")
        child_env = dict(env or {})
        child_env.setdefault("PATH", MINIMAL_PATH)
        pipes = [os.pipe() for _ in range(3)]  # (read, write); close-on-exec here
        ours = (pipes[0][1], pipes[1][0], pipes[2][0])
        theirs = (pipes[0][0], pipes[1][1], pipes[2][1])
        msg = {"op": "spawn", "argv": list(argv), "env": child_env, "cwd": cwd or self.workdir}
        try:
            reply = await self.request(msg, theirs)
        except BaseException:
            for fd in ours:
                os.close(fd)
            raise
        finally:
            for fd in theirs:
                os.close(fd)
        if "pid" not in reply:
            for fd in ours:
                os.close(fd)
            code = int(reply.get("errno") or 0)
            raise OSError(code, str(reply.get("error", "cannot start")), argv[0])
        pid = int(reply["pid"])
        proc = SandboxProcess(self, pid, *ours)
        await proc.connect()
        self.track(proc)
        return proc

    async def sweep(self) -> bool:
        # The whole box, not only the processes we opened: a daemon that left its
        # group is found by nothing else.
        if not await self.alive():
            return False
        try:
            reply = await self.request({"op": "sweep"})
        except RuntimeError:
            return False
        for proc in self.processes:
            proc.swept = True
        return bool(reply.get("clean"))

    async def _teardown(self) -> None:
        if self._start_task is not None:
            with contextlib.suppress(BaseException):
                await self._start_task
        if self._watch is not None:
            await self._watch.stop()
        if self._bwrap is not None:
            # bwrap's pid 1 dies with it (--die-with-parent), and with pid 1 the pid
            # namespace: every process of the box, daemons included.
            with contextlib.suppress(ProcessLookupError):
                self._bwrap.kill()
            await self._bwrap.wait()
        if self._watch is not None:
            await self._watch.release()
        self.close_channel()
        for proc in self.processes:
            proc.exited(-signal.SIGKILL)
            proc.release()
        for d in (self.workdir if self._host_workdir else None, self._channel):
            if d is not None:
                try:
                    os.rmdir(d)  # empty (a session without services): no thread hop
                except OSError:
                    await asyncio.to_thread(shutil.rmtree, d, True)


async def _exit_status(proc: asyncio.subprocess.Process) -> int | None:
    """`proc`'s returncode, or None while it runs; without waiting for it to end.

    The harness's streams end only once the box's pid 1 has died, after bwrap (its
    parent: `--die-with-parent`): by then bwrap has exited, but asyncio may not have
    reaped it yet. So the kernel is asked, leaving it for asyncio to reap (WNOWAIT);
    one asyncio has reaped already reports its returncode at once."""
    if proc.returncode is not None:
        return proc.returncode
    try:
        return _peek(proc.pid)
    except ChildProcessError:  # reaped by asyncio's watcher: its returncode is on its way
        with contextlib.suppress(TimeoutError):
            return await asyncio.wait_for(proc.wait(), _READY_TIMEOUT_S)
        return None


def _peek(pid: int) -> int | None:
    """A child's exit status (negative: the signal that killed it), None while it runs;
    it stays to be reaped (WNOWAIT), and this never blocks (WNOHANG)."""
    info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    if info is None:
        return None
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


def _open_files() -> int:
    """`OPEN_FILES`, or the worker's own hard limit where that is lower (a limit is
    lowered, never raised)."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return OPEN_FILES if hard == resource.RLIM_INFINITY else min(OPEN_FILES, hard)


def _option(argv: list[str], name: str) -> str | None:
    i = argv.index(name) if name in argv else -1
    return argv[i + 1] if 0 <= i < len(argv) - 1 else None


def local_runtime(config: SubprocessConfig) -> Runtime:
    """A `type: subprocess` box: the sandbox, or a plain process group of the worker's
    user when the spec trusts its harness (`isolation: none`)."""
    if config.isolation == "none":
        from episodes.runtimes.subprocess import SubprocessRuntime

        return SubprocessRuntime(config)
    return SandboxRuntime(config)
