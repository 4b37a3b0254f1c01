"""Docker-only behaviour beyond the runtime self-check, on a real engine."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from episodes.errors import RuntimeUnavailable
from episodes.types.runtime import DockerConfig
from tests.support import backends
from tests.support.backends import docker as backend

T = 30.0
ROOT = Path(__file__).resolve().parents[4]


@pytest.fixture(scope="module")
def engine() -> Iterator[object]:
    backends.require(backend)
    yield backend.client()


@pytest.fixture
async def box(engine: object) -> AsyncIterator[object]:
    runtime = backend.make_runtime(pids_limit=99, memory="300m", cpus=0.5)
    await runtime.start()
    try:
        yield runtime
    finally:
        await runtime.stop()


async def output(box: object, *argv: str) -> str:
    proc = await box.open_process(list(argv))
    out = await asyncio.wait_for(proc.stdout.read(), T)
    assert await asyncio.wait_for(proc.wait(), T) == 0
    return out.decode()


def exists(engine: object, name: str) -> bool:
    return bool(engine.containers.list(all=True, filters={"name": f"^/{name}$"}))


async def test_container_is_locked_down_by_default(engine: object, box: object) -> None:
    info = engine.api.inspect_container(box.name)
    host = info["HostConfig"]
    assert host["NetworkMode"] == "none"
    assert host["CapDrop"] == ["ALL"]
    assert "no-new-privileges" in host["SecurityOpt"]
    assert host["PidsLimit"] == 99
    assert host["Memory"] == 300 * 1024 * 1024
    assert host["NanoCpus"] == 500_000_000
    assert host["Init"] is True
    labels = info["Config"]["Labels"]
    assert labels["episodes.managed"] == "true"
    assert labels["episodes.worker"] == backend.WORKER
    assert labels["episodes.session"]
    # ...and in effect, seen from inside: only loopback, no capabilities, no privilege gain.
    assert (await output(box, "ls", "/sys/class/net")).split() == ["lo"]
    status = await output(box, "cat", "/proc/self/status")
    fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    assert fields["CapEff"].strip() == "0000000000000000"
    assert fields["NoNewPrivs"].strip() == "1"
    assert (await output(box, "pwd")).strip() == DockerConfig().workdir


async def test_cleanup_orphans_removes_only_the_given_workers_containers(engine: object) -> None:
    from episodes.runtimes.docker.runtime import cleanup_orphans

    mine, other = f"test-orphan-{uuid.uuid4().hex[:8]}", f"test-other-{uuid.uuid4().hex[:8]}"
    made = []
    for worker in (mine, mine, other):
        labels = {"episodes.managed": "true", "episodes.worker": worker}
        labels["episodes.test_run"] = backend.RUN_ID
        c = engine.containers.create(backend.IMAGE, ["sleep", "infinity"], labels=labels)
        made.append(c.name)
    try:
        assert await asyncio.to_thread(cleanup_orphans, engine, worker=mine) == 2
        assert not exists(engine, made[0]) and not exists(engine, made[1])
        assert exists(engine, made[2])
        assert await asyncio.to_thread(cleanup_orphans, engine, worker=mine) == 0
        assert await asyncio.to_thread(cleanup_orphans, engine, worker=other) == 1
        assert not exists(engine, made[2])
    finally:
        for name in made:
            if exists(engine, name):
                engine.api.remove_container(name, force=True)


async def test_image_harness_round_trips_through_harness_session(box: object) -> None:
    from episodes.harness.native import NativeDriver

    session = NativeDriver(box, ["python3", "-m", "episodes.harness.reference.echo"])
    await asyncio.wait_for(session.start(), T)
    try:
        for n, message in enumerate([{"hello": "box"}, ["ünïcødé", 1, None]]):
            record = await session.turn(n, message, timeout_s=T)
            assert record.error is None, record.error
            assert record.reply == message
    finally:
        await asyncio.wait_for(session.stop(), T)
    assert session.returncode == 0


async def test_bad_cwd_is_one_clear_error(box: object) -> None:
    with pytest.raises(OSError, match="/no/such/dir"):
        await box.open_process(["true"], cwd="/no/such/dir")


async def test_missing_image_names_it(engine: object) -> None:
    from episodes.runtimes.docker.runtime import DockerRuntime

    runtime = DockerRuntime(DockerConfig(image="episodes-no-such-image:0"), labels=backend.labels())
    with pytest.raises(RuntimeUnavailable, match="episodes-no-such-image:0"):
        await runtime.start()
    await runtime.stop()


def _python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, **env},
        check=False,
    )


async def test_no_engine_is_one_clear_error() -> None:
    code = """
        import asyncio
        from episodes.runtimes.docker.runtime import DockerRuntime
        asyncio.run(DockerRuntime().start())
    """
    proc = await asyncio.to_thread(_python, code, DOCKER_HOST="unix:///nonexistent/docker.sock")
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("episodes.errors.RuntimeUnavailable: no Docker engine answers"), last
    assert "scripts/start-docker.sh" in last


async def test_containers_do_not_outlive_a_process_that_forgot_to_stop(engine: object) -> None:
    code = f"""
        import asyncio, json
        from episodes.types.runtime import DockerConfig
        from episodes.runtimes.docker.runtime import DockerRuntime
        async def main():
            box = DockerRuntime(DockerConfig(image={backend.IMAGE!r}), labels={backend.labels()!r})
            await box.start()
            print(json.dumps(box.name))
        asyncio.run(main())
    """
    proc = await asyncio.to_thread(_python, code)
    assert proc.returncode == 0, proc.stderr
    name = json.loads(proc.stdout.strip().splitlines()[-1])
    assert name.startswith("episodes-")
    assert not exists(engine, name)


async def test_a_cancelled_start_leaves_no_container(engine: object) -> None:
    runtime = backend.make_runtime()
    task = asyncio.ensure_future(runtime.start())
    await asyncio.sleep(0.05)  # the create call is under way in its thread
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert runtime.stopped
    assert not exists(engine, runtime.name)


async def test_unread_output_is_bounded_and_then_delivered_intact(box: object) -> None:
    from episodes.runtimes.process_io import HIGH_WATER

    high = HIGH_WATER
    total = 3 * high
    code = (
        f"import os\nfor i in range({total // 65536}):\n    os.write(1, bytes([i % 256]) * 65536)"
    )
    proc = await box.open_process(["python3", "-c", code])
    # Nobody reads: the reader thread must stop at the high-water mark (the process
    # then blocks on a full pipe), not buffer everything.
    for _ in range(300):
        if proc.stdout.pending >= high:
            break
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.5)
    assert high <= proc.stdout.pending <= high + 65536
    out = await asyncio.wait_for(proc.stdout.read(), T)
    assert out == b"".join(bytes([i % 256]) * 65536 for i in range(total // 65536))
    assert await asyncio.wait_for(proc.wait(), T) == 0


async def test_kill_after_exit_sweeps_the_exec_tree_and_the_pool_sweeps_the_box(
    engine: object,
) -> None:
    from episodes.runtimes.docker.runtime import DockerRuntime
    from episodes.runtimes.pool.runtime_pool import RuntimePool

    def factory(config, *, labels=None):  # type: ignore[no-untyped-def]
        return DockerRuntime(config, labels=backend.labels())

    # A harness that leaves a grandchild in a session of its own (setsid) and a
    # daemon that double-forked out of its tree, then exits (issue 11).
    leave = (
        "import os, subprocess, sys, time\n"
        "d = subprocess.DEVNULL\n"
        "s = subprocess.Popen(['sh', '-c', 'setsid sleep 600 & sleep 600'],"
        " stdin=d, stdout=d, stderr=d)\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        os.closerange(0, 3); time.sleep(600)\n"
        "    os._exit(0)\n"
        "time.sleep(0.5)\n"
    )
    count = "import os; print(sum(1 for p in os.listdir('/proc') if p.isdigit()))"
    async with RuntimePool(factory=factory) as pool:
        async with pool.lease("k", DockerConfig(image=backend.IMAGE)) as box:
            before = int(await output(box, "python3", "-c", count))
            proc = await box.open_process(["python3", "-c", leave])
            assert await asyncio.wait_for(proc.wait(), T) == 0
            await proc.kill()  # sweeps the exec's tree: session, group and descendants
            left = int(await output(box, "python3", "-c", count))
            assert left == before + 1, "only the double-forked daemon may survive kill()"
        lease = pool.lease("k", DockerConfig(image=backend.IMAGE))
        async with lease as again:
            assert lease.hit and again is box
            assert int(await output(again, "python3", "-c", count)) == before, (
                "the parked box kept a process of the last episode"
            )


async def test_a_process_may_be_silent_longer_than_the_api_timeout(box: object) -> None:
    """The SDK puts its API timeout (60 s) on an attached exec's socket: a harness
    silent that long (a long model call, a user between turns) read as exited and its
    episode ended `harness_crashed` (CI: Harbor's nop on a loaded machine). The socket
    must block without a timeout (a minute's silence is too slow a test to show)."""
    proc = await box.open_process(["/bin/sh", "-c", 'read line; echo "$line"'])
    assert proc._sock.gettimeout() is None
    await proc.write(b"late\n")
    assert await asyncio.wait_for(proc.stdout.read(), T) == b"late\n"
    assert await asyncio.wait_for(proc.wait(), T) == 0


# Asks to die with its parent (as sdk.serve does), then says who that parent is and
# lives on: it must not be SIGKILLed once `runc exec`, which started it, exits.
_PDEATHSIG = """
import ctypes, os, signal, time
assert ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0) == 0
print(os.getppid(), flush=True)
time.sleep(1.0)
print("alive", flush=True)
"""


async def test_a_program_is_the_child_of_its_wrapper_and_may_die_with_it(box: object) -> None:
    """A program that set PR_SET_PDEATHSIG was SIGKILLed at start whenever it did so
    before `runc exec` (its parent: the wrapper exec'd it) had exited, as Linux sends
    it when the thread that made the process exits (CI: Harbor's busybox task,
    `harness_crashed`, "killed by SIGKILL" in turn 0; the kernel's signal trace named
    runc as the sender). Its parent must be the wrapper, in the box, for its life."""
    proc = await box.open_process(["python3", "-c", _PDEATHSIG])
    out = (await asyncio.wait_for(proc.stdout.read(), T)).decode().split()
    assert await asyncio.wait_for(proc.wait(), T) == 0
    # The old wrapper exec'd the program: its parent was outside the box (ppid 0).
    assert out == [str(proc.pid), "alive"]


async def test_output_that_comes_with_the_engines_upgrade_response_is_kept(
    box: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine may send a short command's output in the packet of its `101`
    response; the SDK's HTTP parsing buffers it, and a reader of the raw socket lost it
    (2 of 300 `echo`s on a loaded machine: Harbor's reset failed "the process could not
    start"). Reading the response late puts the output there every time."""
    import http.client
    import time

    begin = http.client.HTTPResponse.begin

    def late_begin(self: http.client.HTTPResponse) -> None:
        time.sleep(1.0)  # the command has run and written meanwhile
        begin(self)

    monkeypatch.setattr(http.client.HTTPResponse, "begin", late_begin)
    proc = await box.open_process(["/bin/sh", "-c", "echo hi; echo there >&2"])
    monkeypatch.undo()
    assert await asyncio.wait_for(proc.stdout.read(), T) == b"hi\n"
    assert await asyncio.wait_for(proc.stderr.read(), T) == b"there\n"
    assert await asyncio.wait_for(proc.wait(), T) == 0
