"""Which in-box agent a sandbox box runs, and the frames the worker sends it.

The agent (`sandbox.box_init`) is every box's pid 2. As a Python program it costs a box an
interpreter's start (~8 ms of CPU here, more than bwrap's own ~5 ms, and as much
again as a small harness's turn work); so where the worker has a C compiler it
compiles `box_init.c`, the same agent speaking the same protocol, once per worker
process into a private directory (0700, named by the worker's pid so a later worker
reaps it if this one dies: `host_dirs.reap_dead_dirs`). Without a compiler, or
with `EPISODES_SANDBOX_AGENT=python`, boxes run `python -I -S sandbox_init.py`.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from episodes.runtimes.host_dirs import box_dir_prefix
from episodes.runtimes.sandbox import box_init as sandbox_init

log = logging.getLogger(__name__)

SOURCE = Path(__file__).resolve().parent / "box_init.c"
# Where a compiled agent is bound in the box (read-only).
AGENT_IN_BOX = "/run/episodes-agent/sandbox_init"
_COMPILE_TIMEOUT_S = 60

_lock = threading.Lock()
_compiled: dict[int, str | None] = {}  # pid -> path (a fork compiles its own)


def compiled() -> str | None:
    """The compiled agent of this worker process (compiled on the first call), or None
    where it cannot be (no compiler, it failed, or `EPISODES_SANDBOX_AGENT=python`)."""
    if os.environ.get("EPISODES_SANDBOX_AGENT", "").lower() == "python":
        return None
    pid = os.getpid()
    with _lock:
        if pid not in _compiled:
            _compiled[pid] = _compile()
        return _compiled[pid]


async def agent_binary() -> str | None:
    """`compiled()` from the event loop: known after the first box, else compiled in a
    thread (a compiler's run must not stall the loop)."""
    if os.environ.get("EPISODES_SANDBOX_AGENT", "").lower() == "python":
        return None
    pid = os.getpid()
    if pid in _compiled:
        return _compiled[pid]
    return await asyncio.to_thread(compiled)


def _compilers() -> list[list[str]]:
    """The compile commands to try, best first. musl's where there is one (`musl-gcc`,
    Debian's musl-tools): glibc's start-up probes the CPU with some sixty `cpuid`s, and
    on a virtual machine each traps to the hypervisor (~0.35 ms of a 0.45 ms exec here;
    a box execs the agent twice, the launcher and the agent). Then `$CC` or `cc`,
    linked statically where the C library's archive is there (no dynamic loader), else
    as any program. An explicit `$CC` is tried before musl's."""
    cc = os.environ.get("CC")
    found = shutil.which(cc or "cc") or shutil.which("gcc")
    musl = shutil.which("musl-gcc")
    out = [[found, "-static"], [found]] if found else []
    if musl:
        out.insert(1 if cc and found else 0, [musl, "-static"])
    return out


def _compile() -> str | None:
    compilers = _compilers()
    if not compilers or not SOURCE.is_file():
        return None
    where = tempfile.mkdtemp(prefix=f"{box_dir_prefix()}agent-")
    out = os.path.join(where, "sandbox_init")
    done: subprocess.CompletedProcess[bytes] | None = None
    why = ""
    for cc, *static in compilers:
        try:
            done = subprocess.run(
                [cc, "-O2", *static, "-o", out, str(SOURCE)],
                capture_output=True,
                timeout=_COMPILE_TIMEOUT_S,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            done = None
            why = str(e)
        if done is not None and done.returncode == 0:
            break
    if done is None or done.returncode != 0 or not os.path.isfile(out):
        if done is not None:
            why = done.stderr.decode(errors="replace").strip()[-300:]
        log.info("the sandbox agent runs on Python (compiling it failed: %s)", why)
        shutil.rmtree(where, ignore_errors=True)
        return None
    os.chmod(out, 0o555)
    atexit.register(shutil.rmtree, where, True)
    return out


def agent_argv(binary: str | None, control_fd: int, rlimits: str) -> tuple[list[str], list[str]]:
    """The agent's command in the box, and the bwrap arguments that bind it in:
    `binary`, the compiled agent (`agent_binary`), else the Python one."""
    if binary is not None:
        binds = ["--ro-bind", binary, AGENT_IN_BOX]
        argv = [AGENT_IN_BOX, str(control_fd)]
    else:
        binds = []
        argv = [sys.executable, "-I", "-S", sandbox_init.__file__, str(control_fd)]
    return argv + ([rlimits] if rlimits else []), binds


def frame(msg: dict[str, object]) -> bytes:
    """One request to the agent: a length and NUL-terminated fields (`sandbox.box_init`).
    ValueError for what cannot be sent (a NUL in an argument, `=` in a variable's
    name), as `subprocess` says it."""
    op = str(msg["op"])
    fields = [op, str(msg["id"])]
    if op == "spawn":
        argv = [str(a) for a in msg["argv"]]  # type: ignore[attr-defined]
        env = {str(k): str(v) for k, v in msg["env"].items()}  # type: ignore[attr-defined]
        if any("=" in k or not k for k in env):
            raise ValueError("illegal environment variable name")
        fields += [str(msg.get("cwd") or ""), str(len(argv)), *argv, str(len(env))]
        fields += [f"{k}={v}" for k, v in env.items()]
    elif op == "signal":
        fields += [str(int(msg["pid"])), str(int(msg["sig"]))]  # type: ignore[call-overload]
    if any("\0" in f for f in fields):
        raise ValueError("embedded null byte")
    body = b"\0".join(f.encode("utf-8", "surrogateescape") for f in fields) + b"\0"
    return len(body).to_bytes(4, "big") + body
