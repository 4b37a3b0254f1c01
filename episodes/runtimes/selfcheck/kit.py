"""What the self-check is made of: their subject, small assertion helpers, and the
programs they run in a box (`python -c` snippets, stdlib only)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from episodes.runtimes.base import Runtime, RuntimeProcess

# The harness protocol (8-byte big-endian length, JSON body) echoing every turn.
ECHO_HARNESS = r"""
import json, struct, sys
r, w = sys.stdin.buffer, sys.stdout.buffer
def send(obj):
    body = json.dumps(obj).encode()
    w.write(struct.pack(">Q", len(body)) + body)
    w.flush()
def read_exact(n):
    data = b""
    while len(data) < n:
        chunk = r.read(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data
send({"type": "ready"})
while (head := read_exact(8)) is not None:
    pkt = json.loads(read_exact(struct.unpack(">Q", head)[0]))
    if pkt["type"] == "shutdown":
        break
    send({"type": "event", "turn": pkt["turn"], "event": {"size": len(json.dumps(pkt["message"]))}})
    send({"type": "reply", "turn": pkt["turn"], "message": pkt["message"]})
"""

LINE_ECHO = r"""
import sys
for line in sys.stdin:
    sys.stdout.write(line.upper())
    sys.stdout.flush()
sys.stderr.write("stdin closed\n")
"""

# Announces itself only once the handler is installed, so a check never signals early.
IGNORE_TERM = r"""
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
print("ready", child.pid, flush=True)
time.sleep(600)
"""

# Exits at once, leaving a child in its process group (stdio detached, so the
# process's streams end with it). Prints the child's pid.
LEAVE_A_CHILD = r"""
import subprocess, sys
d = subprocess.DEVNULL
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
    stdin=d, stdout=d, stderr=d)
print(child.pid, flush=True)
"""

# argv[1] is a pid in the box: prints "gone" once it is dead or a zombie, within
# argv[2] seconds (default 20), else "alive".
PID_GONE = r"""
import sys, time
def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
pid = int(sys.argv[1])
deadline = time.monotonic() + (float(sys.argv[2]) if len(sys.argv) > 2 else 20)
while alive(pid) and time.monotonic() < deadline:
    time.sleep(0.05)
print("alive" if alive(pid) else "gone")
"""

SLEEPER = 'import time; print("ready", flush=True); time.sleep(600)'


# Generous: a loaded 2-core machine with vfs storage is slow, never this slow.
T = 30.0


class Skipped(Exception):
    """The check cannot run on this backend (not a failure)."""


@dataclass
class Subject:
    """What a check runs against."""

    box: Runtime  # started
    python: list[str]  # argv prefix that runs python inside the box
    kill_box: Callable[[Runtime], None] | None = None  # destroy the box from outside


Check = Callable[[Subject], Awaitable[None]]


async def within(aw: Awaitable[Any], timeout: float = T) -> Any:
    return await asyncio.wait_for(aw, timeout)


async def read_line(stream: Any, timeout: float = T) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = await within(stream.read(1), timeout)
        if not chunk:
            break
        data += chunk
    return data


@contextlib.asynccontextmanager
async def running(s: Subject, code: str, **kw: Any) -> AsyncIterator[RuntimeProcess]:
    """A python process in the box that is killed (group and all) when the check leaves."""
    proc = await within(s.box.open_process([*s.python, "-c", code], **kw))
    try:
        yield proc
    finally:
        if proc.returncode is None:
            await proc.kill()
            with contextlib.suppress(Exception):
                await within(proc.wait())


async def run(s: Subject, code: str, **kw: Any) -> tuple[int, bytes, bytes]:
    async with running(s, code, **kw) as proc:
        await proc.close_stdin()
        out, err = await within(asyncio.gather(proc.stdout.read(), proc.stderr.read()))
        return await within(proc.wait()), out, err


async def raises(aw: Awaitable[Any], *errors: type[BaseException], what: str) -> None:
    try:
        await aw
    except errors:
        return
    raise AssertionError(f"{what}: expected {' or '.join(e.__name__ for e in errors)}")


def equal(got: Any, want: Any, what: str) -> None:
    if got != want:
        raise AssertionError(f"{what}: got {got!r}, want {want!r}")


async def pid_state(s: Subject, pid: str, want: str, what: str, *, wait_s: float = 20) -> None:
    """Whether `pid` runs in the box ("alive"), or has died within `wait_s` ("gone")."""
    argv = [*s.python, "-c", PID_GONE, pid, str(wait_s)]
    check = await within(s.box.open_process(argv))
    equal(await within(check.stdout.read()), f"{want}\n".encode(), what)
    equal(await within(check.wait()), 0, "the pid checker's exit code")


async def pid_gone(s: Subject, pid: str, what: str) -> None:
    await pid_state(s, pid, "gone", what)
