"""The runtime interface: a box that can run processes, and one running process.

Every backend (subprocess, Docker, Modal, Prime) implements these two classes and
passes the same self-check (`episodes.runtimes.selfcheck.runner`, run in `tests/episodes/runtimes/`).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from episodes.aio import finish

# The most files a process of a box may hold open (RLIMIT_NOFILE, soft and hard), where
# the runtime sets it (the sandbox in every mode, Docker): never the worker's or the
# engine's own, often 1,048,576 in a container (docs/containment.md).
OPEN_FILES = 4096


class ByteStream(Protocol):
    """An async byte stream. `read()` returns b"" at end of stream, like asyncio.StreamReader."""

    async def read(self, n: int = -1) -> bytes: ...


class RuntimeProcess(abc.ABC):
    """One process inside a box, with raw byte pipes."""

    @property
    @abc.abstractmethod
    def stdout(self) -> ByteStream: ...

    @property
    @abc.abstractmethod
    def stderr(self) -> ByteStream: ...

    @property
    @abc.abstractmethod
    def pid(self) -> int | None:
        """The process id inside its box, when known."""

    @property
    @abc.abstractmethod
    def returncode(self) -> int | None:
        """Exit code once the process has exited, else None. Negative for a signal."""

    @abc.abstractmethod
    async def write(self, data: bytes) -> None:
        """Write to stdin and flush. Raises BrokenPipeError/ConnectionResetError if it is gone."""

    @abc.abstractmethod
    async def close_stdin(self) -> None: ...

    @abc.abstractmethod
    async def wait(self) -> int:
        """Wait for exit and return the exit code (negative signal number if signalled)."""

    @abc.abstractmethod
    async def terminate(self) -> None:
        """SIGTERM to the process group. No-op once exited."""

    @abc.abstractmethod
    async def kill(self) -> None:
        """SIGKILL to the process group. No-op once exited."""


class Runtime(abc.ABC):
    """A box: something that lives for an episode (or longer, in a pool) and runs processes."""

    #: A stable id for the box (container id, sandbox id, or a local uuid).
    id: str = ""

    #: The Python a program in the box runs with (`{python}` in a harness command; the
    #: in-box relay and tunnel end): one path, stdlib only. A Docker box with the runtime
    #: bundle mounted has one whatever its image (`episodes.runtimes.docker.bundle`).
    box_python: str = "python3"
    #: The folder in the box holding this package's stdlib-only files (`{episodes}` in a
    #: harness command): `<box_episodes>/episodes/tunnel/relay.py` and the like.
    box_episodes: str = "/opt/episodes"

    #: Processes in the box reach the worker's 127.0.0.1 (a local subprocess): the
    #: session's tool bridge and model proxy are given to them as loopback URLs.
    shares_host_loopback: bool = False

    @property
    def channel_dir(self) -> tuple[Path, str] | None:
        """A private host directory bind-mounted into the box, and its path inside:
        where a box without a network finds the session's Unix sockets (the in-box
        relay serves them on its loopback). None: this box has no such directory."""
        return None

    async def open_relay(self, argv: list[str]) -> RuntimeProcess:
        """Start the in-box relay that serves `channel_dir`'s sockets (a backend may run
        it as another user, e.g. the directory's owner)."""
        return await self.open_process(argv, {}, None)

    @abc.abstractmethod
    async def start(self) -> None:
        """Create the box. Raises RuntimeUnavailable or an infrastructure error."""

    _stopped = False
    _stop_task: asyncio.Future[None] | None = None

    async def stop(self) -> None:
        """Destroy the box and everything in it.

        Idempotent, and shielded from cancellation: a cancelled caller must not
        leave a container or VM behind. The work is the backend's `_teardown`.
        """
        self._stopped = True
        if self._stop_task is None:
            self._stop_task = asyncio.ensure_future(self._teardown())
        await finish(self._stop_task)

    @abc.abstractmethod
    async def _teardown(self) -> None:
        """What stop() does, exactly once (it may follow a failed or partial start)."""

    @property
    def stopped(self) -> bool:
        return self._stopped

    async def sweep(self) -> bool:
        """End every process still running in the box, harness leftovers included, so
        the next episode gets it without them (the pool calls this before parking).

        True if nothing is left running. This default cannot know, so a backend that
        does not say is never parked: its box is stopped instead.
        """
        return False

    async def sweep_orphans(self) -> bool:
        """End every process the box's processes left behind (adopted by the box's init:
        a background job whose shell exited, a daemon), sparing the processes the
        worker started (a live harness, the relay) and their children. True if none is
        left. This default cannot: False (a caller that needs it refuses to go on)."""
        return False

    async def limit_exceeded(self) -> str | None:
        """One line naming the limit (`limits`) the box went past, or None: a process
        of a box past a limit ends its episode `limit_exceeded`, not as a crash. This
        default knows of none."""
        return None

    async def box_lost(self) -> str | None:
        """Asked when a harness process ended unexpectedly: one line saying why the box
        itself is gone for a reason that is not the harness's (removed or stopped from
        outside, its engine or VM gone), or None (the box is there: the harness's own
        crash). The episode then fails over to a fresh box instead of ending
        `harness_crashed`. This default knows of none."""
        return None

    @abc.abstractmethod
    async def alive(self) -> bool:
        """True if the box still exists and can run processes."""

    @abc.abstractmethod
    async def open_process(
        self,
        argv: list[str],
        env: dict[str, str] | None = None,
        cwd: str | None = None,
    ) -> RuntimeProcess:
        """Start `argv` in the box with exactly `env` (no host environment leaks in)."""

    async def __aenter__(self) -> Runtime:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


async def end_processes(procs: Sequence[RuntimeProcess], wait_s: float = 5.0) -> None:
    """SIGKILL each process group, wait for each leader (bounded), then SIGKILL again:
    the second kill, after the leader exited, sweeps what it left in its group."""
    for p in procs:
        await p.kill()
    for p in procs:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(p.wait(), wait_s)
        await p.kill()
