"""The default local runtime: a bubblewrap sandbox (needs `bwrap`)."""

from __future__ import annotations

import os
import signal
import sys

from episodes.runtimes.base import Runtime

NAME = "sandbox"
PYTHON = [sys.executable]
_made: list[Runtime] = []


def skip_reason() -> str | None:
    from episodes.runtimes.sandbox.runtime import BWRAP_MISSING, bwrap_path

    return None if bwrap_path() else BWRAP_MISSING


def make_runtime() -> Runtime:
    from episodes.runtimes.sandbox.runtime import SandboxRuntime

    runtime = SandboxRuntime()
    _made.append(runtime)
    return runtime


def kill_box(runtime: Runtime) -> None:
    """SIGKILL the box's bwrap from outside, as the OOM killer or an operator might."""
    from episodes.runtimes.sandbox.runtime import SandboxRuntime

    assert isinstance(runtime, SandboxRuntime) and runtime.bwrap_pid is not None
    os.kill(runtime.bwrap_pid, signal.SIGKILL)


def leftovers() -> list[str]:
    """Boxes of this run whose bwrap still runs (each holds a whole pid namespace).
    The process at the pid must be that box's bwrap (its argv names the box): pids are
    reused (pid_max is 32768 here), and a suite of several processes reused a box's
    pid within minutes, which read as a box left behind."""
    left = []
    for runtime in _made:
        pid = getattr(runtime, "bwrap_pid", None)
        if pid is not None and _running(pid) and runtime.id in _argv(pid):
            left.append(runtime.id)
    return left


def _argv(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False
