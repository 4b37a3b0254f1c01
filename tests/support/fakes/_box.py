"""A local stand-in for a cloud box: its processes, its environment, its filesystem bits.

A box's processes are real local processes, each exec in its own session. Destroying
the box SIGKILLs every process that carries the box's marker variable or descends
from one of its execs, the way a container's processes all die with it. The marker
stands in for the variables a platform sets in its boxes (Modal sets MODAL_* ones).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import tempfile

import psutil

MARK = "EPISODES_FAKE_BOX"
MINIMAL_PATH = "/usr/local/bin:/usr/bin:/bin"


class BoxGone(Exception):
    """Raised by a fake when asked to run something in a destroyed box."""


class LocalBox:
    def __init__(self, box_id: str, env: dict[str, str] | None, workdir: str | None) -> None:
        self.id = box_id
        self.tmp = tempfile.mkdtemp(prefix=f"fake-box-{box_id}-")
        self.workdir = workdir or self.tmp
        os.makedirs(self.workdir, exist_ok=True)
        # The box's own environment: nothing of the host's but a PATH to find sh & co.
        self.env = {"PATH": MINIMAL_PATH, "TMPDIR": self.tmp, MARK: box_id, **(env or {})}
        self.dead = False
        self._roots: list[psutil.Process] = []  # remember identity: pids get reused

    async def spawn(
        self, argv: list[str], env: dict[str, str | None] | None, cwd: str | None
    ) -> asyncio.subprocess.Process:
        if self.dead:
            raise BoxGone(f"box {self.id} is gone")
        full = dict(self.env)
        for k, v in (env or {}).items():
            if v is None:
                full.pop(k, None)
            else:
                full[k] = v
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=full,
            cwd=cwd or self.workdir,
            start_new_session=True,
        )
        with contextlib.suppress(psutil.Error):
            self._roots = [p for p in self._roots if p.is_running()]
            self._roots.append(psutil.Process(proc.pid))
        return proc

    def members(self) -> set[int]:
        """Pids of every live process of this box."""
        found: set[int] = set()
        for root in list(self._roots):
            with contextlib.suppress(psutil.Error):
                if root.is_running():
                    found.add(root.pid)
                    found.update(c.pid for c in root.children(recursive=True))
        for p in psutil.process_iter():
            with contextlib.suppress(psutil.Error):
                if p.environ().get(MARK) == self.id:
                    found.add(p.pid)
                    found.update(c.pid for c in p.children(recursive=True))
        found.discard(os.getpid())
        return {
            pid for pid in found if psutil.pid_exists(pid) and _status(pid) != psutil.STATUS_ZOMBIE
        }

    def destroy(self) -> None:
        """SIGKILL all of the box and drop its files. Thread-safe (no event loop use)."""
        self.dead = True
        for _ in range(3):  # a process may fork between the scan and the kill
            victims = self.members()
            if not victims:
                break
            for pid in victims:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.tmp, ignore_errors=True)
        if self.workdir != self.tmp:
            shutil.rmtree(self.workdir, ignore_errors=True)


def _status(pid: int) -> str | None:
    try:
        return psutil.Process(pid).status()
    except psutil.Error:
        return None
