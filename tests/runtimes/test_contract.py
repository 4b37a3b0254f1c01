"""The runtime contract, run against every backend in tests/runtimes/backends/.

What every backend must do (and what callers may rely on):
- stdout and stderr are separate raw byte streams; read() returns b"" at end of stream.
- stdin takes writes at any time while the process runs; close_stdin() is its EOF. A
  write to a process that does not read waits (it neither fails nor returns early)
  until the process reads or dies; then it raises BrokenPipeError/ConnectionResetError.
- wait() returns the exit code, or the NEGATIVE signal number for a signalled process
  (-15 after terminate(), -9 after kill()); a process of a box that was stopped
  reports -9. returncode is None until then.
- terminate()/kill() signal the whole process group, so children go too.
- A process sees exactly the env it is given (plus what the box itself defines),
  never the caller's environment; cwd defaults to a writable directory of the box.
- stop() is idempotent; after it alive() is False and open_process() raises.

Programs are `python -c` snippets so that they run in any box with a python.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from collections.abc import AsyncIterator
from types import ModuleType
from typing import Any

import pytest

from episodes.harness.protocol import PacketDecoder, encode, read_packet
from episodes.runtimes.base import Runtime, RuntimeProcess

# Generous: a loaded 2-core machine with vfs storage is slow, never this slow.
T = 30.0

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

# Announces itself only once the handler is installed, so a test never signals early.
IGNORE_TERM = r"""
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
print("ready", child.pid, flush=True)
time.sleep(600)
"""

# argv[1] is a pid in the box: prints "gone" once it is dead or a zombie (within 20 s).
PID_GONE = r"""
import sys, time
def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
pid, deadline = int(sys.argv[1]), time.monotonic() + 20
while alive(pid) and time.monotonic() < deadline:
    time.sleep(0.05)
print("alive" if alive(pid) else "gone")
"""

SLEEPER = 'import time; print("ready", flush=True); time.sleep(600)'


async def within(aw: Any, timeout: float = T) -> Any:
    return await asyncio.wait_for(aw, timeout)


async def read_line(stream: Any) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = await within(stream.read(1))
        if not chunk:
            break
        data += chunk
    return data


@contextlib.asynccontextmanager
async def running(
    box: Runtime, backend: ModuleType, code: str, **kw: Any
) -> AsyncIterator[RuntimeProcess]:
    """A python process in `box` that is killed (group and all) when the test leaves."""
    proc = await within(box.open_process([*backend.PYTHON, "-c", code], **kw))
    try:
        yield proc
    finally:
        if proc.returncode is None:
            await proc.kill()
            with contextlib.suppress(Exception):
                await within(proc.wait())


async def run(box: Runtime, backend: ModuleType, code: str, **kw: Any) -> tuple[int, bytes, bytes]:
    async with running(box, backend, code, **kw) as proc:
        await proc.close_stdin()
        out, err = await within(asyncio.gather(proc.stdout.read(), proc.stderr.read()))
        return await within(proc.wait()), out, err


async def test_stdout_and_stderr_are_separate(shared_box: Runtime, backend: ModuleType) -> None:
    code = "import sys; sys.stdout.write('to-out'); sys.stderr.write('to-err'); print(' more')"
    rc, out, err = await run(shared_box, backend, code)
    assert (rc, out, err) == (0, b"to-out more\n", b"to-err")


async def test_large_interleaved_output_arrives_intact(
    shared_box: Runtime, backend: ModuleType
) -> None:
    # More than any internal buffer (pipe, frame, flow-control window), both streams
    # at once, read concurrently as a host must.
    code = (
        "import os, sys\n"
        "for i in range(96):\n"
        "    block = bytes([i]) * 65536\n"
        "    os.write(1, block); os.write(2, block[::-1])\n"
    )
    rc, out, err = await run(shared_box, backend, code)
    expected = b"".join(bytes([i]) * 65536 for i in range(96))
    assert rc == 0

    def digest(data: bytes) -> tuple[int, str]:  # not 6 MiB of diff on failure
        return len(data), hashlib.sha256(data).hexdigest()

    assert digest(out) == digest(expected)
    assert digest(err) == digest(expected)


async def test_stdin_round_trips_with_delayed_writes(
    shared_box: Runtime, backend: ModuleType
) -> None:
    async with running(shared_box, backend, LINE_ECHO) as proc:
        await proc.write(b"first\n")
        assert await read_line(proc.stdout) == b"FIRST\n"
        await asyncio.sleep(0.5)  # the process sits blocked on stdin meanwhile
        await proc.write(b"sec")
        await asyncio.sleep(0.2)
        await proc.write(b"ond\nthird\n")
        assert await read_line(proc.stdout) == b"SECOND\n"
        assert await read_line(proc.stdout) == b"THIRD\n"
        assert proc.returncode is None
        await proc.close_stdin()
        assert await within(proc.stdout.read()) == b""
        assert await within(proc.stderr.read()) == b"stdin closed\n"
        assert await within(proc.wait()) == 0
        assert proc.returncode == 0


async def test_framed_round_trips(shared_box: Runtime, backend: ModuleType) -> None:
    decoder = PacketDecoder()
    async with running(shared_box, backend, ECHO_HARNESS) as proc:
        assert await within(read_packet(proc.stdout, decoder)) == {"type": "ready"}
        messages = [
            {"text": "hello"},
            {"text": "ünïcødé ✓", "n": [1, 2.5, None, True]},
            {"blob": "x" * (1024 * 1024)},  # a packet bigger than any read chunk
            "just a string",
        ]
        for turn, message in enumerate(messages):
            await proc.write(encode({"type": "turn", "turn": turn, "message": message}))
            event = await within(read_packet(proc.stdout, decoder))
            assert event == {
                "type": "event",
                "turn": turn,
                "event": {"size": len(json.dumps(message))},
            }
            reply = await within(read_packet(proc.stdout, decoder))
            assert reply == {"type": "reply", "turn": turn, "message": message}
        await proc.write(encode({"type": "shutdown"}))
        assert await within(read_packet(proc.stdout, decoder)) is None
        assert await within(proc.wait()) == 0


@pytest.mark.parametrize("code", [0, 3])
async def test_exit_code(shared_box: Runtime, backend: ModuleType, code: int) -> None:
    rc, _, _ = await run(shared_box, backend, f"import sys; sys.exit({code})")
    assert rc == code


async def test_concurrent_processes_keep_their_streams(
    shared_box: Runtime, backend: ModuleType
) -> None:
    async def one(i: int) -> tuple[int, bytes, bytes]:
        code = f"import sys; sys.stdout.write('out{i}' * 1000); sys.stderr.write('err{i}')"
        return await run(shared_box, backend, code)

    results = await within(asyncio.gather(*(one(i) for i in range(5))))
    assert results == [(0, f"out{i}".encode() * 1000, f"err{i}".encode()) for i in range(5)]


async def test_terminate_reports_negative_sigterm(shared_box: Runtime, backend: ModuleType) -> None:
    async with running(shared_box, backend, SLEEPER) as proc:
        assert isinstance(proc.pid, int)
        assert await read_line(proc.stdout) == b"ready\n"
        assert proc.returncode is None
        await proc.terminate()
        assert await within(proc.wait()) == -15
        assert proc.returncode == -15
        await proc.terminate()  # no-op once exited
        await proc.kill()


async def test_kill_ends_a_group_that_ignores_sigterm(
    shared_box: Runtime, backend: ModuleType
) -> None:
    async with running(shared_box, backend, IGNORE_TERM) as proc:
        ready, child = (await read_line(proc.stdout)).split()
        assert ready == b"ready"
        await proc.terminate()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.shield(proc.wait()), 1.0)
        assert proc.returncode is None
        await proc.kill()
        assert await within(proc.wait()) == -9
        assert await within(proc.stdout.read()) == b""
        checker = [*backend.PYTHON, "-c", PID_GONE, child.decode()]
        check = await within(shared_box.open_process(checker))
        assert await within(check.stdout.read()) == b"gone\n", "the child outlived kill()"
        assert await within(check.wait()) == 0


async def test_write_after_exit_raises(shared_box: Runtime, backend: ModuleType) -> None:
    async with running(shared_box, backend, "pass") as proc:
        assert await within(proc.wait()) == 0
        with pytest.raises((BrokenPipeError, ConnectionResetError)):
            for _ in range(100):  # an OS may accept a first write into a dead pipe
                await proc.write(b"x" * 65536)


async def test_kill_releases_a_write_blocked_on_a_process_that_never_reads(
    shared_box: Runtime, backend: ModuleType
) -> None:
    async with running(shared_box, backend, SLEEPER) as proc:
        assert await read_line(proc.stdout) == b"ready\n"
        # More than a maximal packet (16 MiB) and than any pipe or socket buffer holds:
        # this write cannot complete, and must not fail either, until the process dies.
        write = asyncio.ensure_future(proc.write(b"x" * (20 * 1024 * 1024)))
        done, _ = await asyncio.wait([write], timeout=1.0)
        assert not done, f"a 20 MiB write to a process that never reads returned: {write}"
        await proc.kill()
        assert await within(proc.wait()) == -9
        with pytest.raises((BrokenPipeError, ConnectionResetError)):
            await within(write)


async def test_env_is_exactly_what_was_given(
    shared_box: Runtime, backend: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EPISODES_CONTRACT_HOST_SECRET", "must-not-leak")
    code = "import json, os; print(json.dumps(dict(os.environ)))"
    rc, out, _ = await run(shared_box, backend, code, env={"GIVEN": "yes", "OTHER": "a=b c"})
    env = json.loads(out)
    assert rc == 0
    assert env["GIVEN"] == "yes" and env["OTHER"] == "a=b c"
    assert "EPISODES_CONTRACT_HOST_SECRET" not in env


async def test_cwd_default_is_writable_and_explicit_cwd_is_used(
    shared_box: Runtime, backend: ModuleType
) -> None:
    code = "import os; open('probe.txt', 'w').write('ok'); print(os.getcwd())"
    rc, out, _ = await run(shared_box, backend, code)
    assert rc == 0
    default = out.decode().strip()
    rc, out, _ = await run(shared_box, backend, "import tempfile; print(tempfile.mkdtemp())")
    target = out.decode().strip()
    assert rc == 0 and target != default
    code = "import os; print(os.path.realpath(os.getcwd()))"
    rc, out, _ = await run(shared_box, backend, code, cwd=target)
    code = f"import os; print(os.path.realpath({target!r}))"
    _, expected, _ = await run(shared_box, backend, code)
    assert rc == 0 and out == expected


async def test_stop_twice(box: Runtime) -> None:
    assert await box.alive()
    await within(box.stop())
    await within(box.stop())
    assert box.stopped
    assert not await box.alive()
    with pytest.raises(RuntimeError):
        await box.open_process(["true"])


async def test_stop_ends_running_processes(box: Runtime, backend: ModuleType) -> None:
    proc = await within(box.open_process([*backend.PYTHON, "-c", SLEEPER]))
    assert await read_line(proc.stdout) == b"ready\n"
    await within(box.stop())
    assert await within(proc.wait()) == -9
    assert await within(proc.stdout.read()) == b""


async def test_alive_is_false_after_the_box_died(box: Runtime, backend: ModuleType) -> None:
    kill_box = getattr(backend, "kill_box", None)
    if kill_box is None:
        pytest.skip(f"{backend.NAME}: a box cannot be killed from outside")
    assert await box.alive()
    await asyncio.to_thread(kill_box, box)
    for _ in range(100):  # the kill lands asynchronously on some engines
        if not await box.alive():
            break
        await asyncio.sleep(0.1)
    assert not await box.alive()
    await within(box.stop())  # stopping a dead box is fine


async def test_stop_is_finished_even_if_the_caller_is_cancelled(
    box: Runtime, backend: ModuleType
) -> None:
    proc = await within(box.open_process([*backend.PYTHON, "-c", SLEEPER]))
    assert await read_line(proc.stdout) == b"ready\n"
    task = asyncio.ensure_future(box.stop())
    await asyncio.sleep(0)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    # No second stop() yet: the cancelled one alone must have ended the process.
    assert await within(proc.wait()) == -9
    assert not await box.alive()
    await within(box.stop())
