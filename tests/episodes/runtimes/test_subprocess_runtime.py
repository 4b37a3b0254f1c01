"""SubprocessRuntime and SubprocessProcess on real processes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys

import pytest

from episodes.runtimes import make_runtime
from episodes.runtimes.subprocess import MINIMAL_PATH, SubprocessRuntime
from episodes.types.runtime import SubprocessConfig
from tests.support.procs import assert_group_gone, assert_pids_gone, descendants

PY = sys.executable


async def read_all(stream) -> bytes:
    out = b""
    while chunk := await stream.read(65536):
        out += chunk
    return out


async def test_the_default_is_the_sandbox_and_none_is_a_process_group():
    from episodes.runtimes.sandbox.runtime import SandboxRuntime

    assert isinstance(make_runtime(SubprocessConfig()), SandboxRuntime)
    assert isinstance(make_runtime(SubprocessConfig(isolation="none")), SubprocessRuntime)


async def test_lifecycle_workdir_and_id():
    rt = make_runtime(SubprocessConfig(isolation="none"))
    assert isinstance(rt, SubprocessRuntime)
    assert not await rt.alive()
    await rt.start()
    assert await rt.alive() and not rt.stopped
    assert len(rt.id) == 12
    assert rt.workdir is not None and os.path.isdir(rt.workdir)
    proc = await rt.open_process([PY, "-c", "import os; print(os.getcwd())"], {})
    assert (await read_all(proc.stdout)).decode().strip() == os.path.realpath(rt.workdir)
    assert await proc.wait() == 0
    await rt.stop()
    assert rt.stopped and not await rt.alive()
    assert not os.path.exists(rt.workdir)
    await rt.stop()  # idempotent
    with pytest.raises(RuntimeError, match="not running"):
        await rt.open_process([PY, "-c", "pass"], {})


async def test_env_is_exactly_what_is_passed(runtime, monkeypatch):
    monkeypatch.setenv("SECRET_TOKEN", "do-not-leak")
    code = "import json, os; print(json.dumps(dict(os.environ)))"
    proc = await runtime.open_process([PY, "-c", code], {"A": "1"})
    env = json.loads(await read_all(proc.stdout))
    env.pop("LC_CTYPE", None)  # Python itself may add this for the C locale (PEP 538)
    assert env == {"A": "1", "PATH": MINIMAL_PATH}
    # A bare command name resolves through the minimal PATH.
    proc = await runtime.open_process(["sh", "-c", "echo $SECRET_TOKEN-$PATH"], None)
    assert (await read_all(proc.stdout)).decode().strip() == f"-{MINIMAL_PATH}"
    await proc.wait()


async def test_cwd_override_and_missing_executable(runtime, tmp_path):
    proc = await runtime.open_process(
        [PY, "-c", "import os; print(os.getcwd())"], {}, str(tmp_path)
    )
    assert (await read_all(proc.stdout)).decode().strip() == str(tmp_path)
    await proc.wait()
    with pytest.raises(FileNotFoundError):
        await runtime.open_process(["no-such-harness-binary"], {})


async def test_exit_codes_pipes_and_own_group(runtime):
    proc = await runtime.open_process(
        [
            PY,
            "-c",
            "import sys; sys.stderr.write('oops'); print(sys.stdin.readline()); sys.exit(5)",
        ],
        {},
    )
    assert os.getpgid(proc.pid) == proc.pid != os.getpgid(0)
    await proc.write(b"hello\n")
    assert (await read_all(proc.stdout)).strip() == b"hello"
    assert await read_all(proc.stderr) == b"oops"
    assert await proc.wait() == 5 and proc.returncode == 5
    with pytest.raises((BrokenPipeError, ConnectionResetError)):
        await proc.write(b"anyone there?\n")
    await proc.terminate()  # no-ops once exited
    await proc.kill()
    await proc.close_stdin()


async def test_signal_return_codes(runtime):
    proc = await runtime.open_process([PY, "-c", "import time; time.sleep(60)"], {})
    await proc.terminate()
    assert await proc.wait() == -signal.SIGTERM
    proc = await runtime.open_process(
        [
            PY,
            "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready', flush=True); time.sleep(60)",
        ],
        {},
    )
    assert await proc.stdout.read(5) == b"ready"
    await proc.terminate()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(proc.wait(), 0.5)
    await proc.kill()
    assert await proc.wait() == -signal.SIGKILL


async def test_write_to_a_process_that_closed_stdin(runtime):
    proc = await runtime.open_process(
        [PY, "-c", "import os, time; os.close(0); time.sleep(60)"], {}
    )
    with pytest.raises((BrokenPipeError, ConnectionResetError)):
        for _ in range(100):  # the first writes may land in the pipe before EPIPE shows
            await proc.write(b"x" * 65536)
    await proc.kill()
    await proc.wait()


async def test_wait_returns_at_exit_even_if_a_grandchild_holds_stdout(runtime):
    code = (
        "import subprocess, sys; "
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        "print(p.pid, flush=True)"
    )
    proc = await runtime.open_process([PY, "-c", code], {})
    grandchild = int((await proc.stdout.readline()).decode())
    assert await asyncio.wait_for(proc.wait(), 10) == 0
    await proc.kill()  # the leader is gone: this sweeps its group
    assert_pids_gone([grandchild])
    assert_group_gone(proc.pid)


async def test_stop_kills_every_process_and_grandchild():
    rt = SubprocessRuntime()
    await rt.start()
    code = (
        "import subprocess, sys, time; "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        "print('up', flush=True); time.sleep(60)"
    )
    procs = [await rt.open_process([PY, "-c", code], {}) for _ in range(3)]
    for p in procs:
        assert await p.stdout.readline() == b"up\n"
    family = [pid for p in procs for pid in (p.pid, *descendants(p.pid))]
    assert len(family) == 6
    await rt.stop()
    assert all(p.returncode == -signal.SIGKILL for p in procs)
    assert_pids_gone(family)
    for p in procs:
        assert_group_gone(p.pid)


async def test_stop_finishes_when_its_caller_is_cancelled():
    rt = SubprocessRuntime()
    await rt.start()
    proc = await rt.open_process([PY, "-c", "import time; time.sleep(60)"], {})
    stopping = asyncio.create_task(rt.stop())
    await asyncio.sleep(0)
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopping
    assert proc.returncode == -signal.SIGKILL
    assert rt.workdir is not None and not os.path.exists(rt.workdir)
    assert_group_gone(proc.pid)


async def test_a_reused_group_id_is_never_signalled(runtime):
    """After a harness's leader exits, its group id is free: another process may lead a
    group of that id (on a host with pid_max 32768, within seconds; a `docker exec`'s
    process does). The last sweep must not SIGKILL it: the old code killed the other
    box's harness (episodes ended `harness_crashed`, "killed by SIGKILL")."""
    proc = await runtime.open_process(["/bin/true"], {})
    assert await proc.wait() == 0
    # Stand in for the reuse: another process leading its own group and session.
    other = await asyncio.create_subprocess_exec("sleep", "60", start_new_session=True)
    try:
        proc._pgid = other.pid  # type: ignore[attr-defined]
        await proc.kill()
        await proc.terminate()
        with pytest.raises(TimeoutError):  # never ends: it was not signalled
            await asyncio.wait_for(asyncio.shield(other.wait()), 1)
        assert other.returncode is None and os.path.exists(f"/proc/{other.pid}")
    finally:
        other.kill()
        await other.wait()
