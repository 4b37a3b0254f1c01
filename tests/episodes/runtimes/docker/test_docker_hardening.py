"""Each restriction of a default Docker box, tried from inside it on the real engine.

Not the flags the engine was given (test_docker_extra checks those) but what they do:
a process of the box cannot write the image's filesystem, runs as a non-root user
without capabilities, cannot fork past the pids limit and reaches nothing but its own
loopback; the worker's control execs can still end every process in it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
import textwrap
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psutil
import pytest

from tests.support import backends
from tests.support.backends import docker as backend

pytestmark = [pytest.mark.docker, pytest.mark.timeout(120)]
T = 30.0
BOX_UID = 10001  # the `episodes` user of scripts/build-image.sh, DockerConfig.user


@pytest.fixture(scope="module")
def engine() -> Iterator[Any]:
    backends.require(backend)
    yield backend.client()


@contextlib.asynccontextmanager
async def started(**config: Any) -> AsyncIterator[Any]:
    runtime = backend.make_runtime(**config)
    await runtime.start()
    try:
        yield runtime
    finally:
        await runtime.stop()


@pytest.fixture(scope="module")
async def box(engine: Any) -> AsyncIterator[Any]:
    async with started() as runtime:
        yield runtime


async def py(box: Any, code: str, **kw: Any) -> tuple[int, str]:
    """Run Python in the box; its exit code and stdout+stderr."""
    proc = await box.open_process(["python3", "-c", textwrap.dedent(code)], **kw)
    out, err = await asyncio.wait_for(asyncio.gather(proc.stdout.read(), proc.stderr.read()), T)
    return await asyncio.wait_for(proc.wait(), T), (out + err).decode()


WRITE = """
import errno, sys
for path in sys.argv[1:]:
    try:
        open(path + "/probe", "w").close()
        print(path, "ok")
    except OSError as e:
        print(path, errno.errorcode[e.errno])
"""


async def writes(box: Any, *paths: str) -> dict[str, str]:
    code, out = await py(box, f"import sys; sys.argv[1:] = {list(paths)!r}\n{WRITE}")
    assert code == 0, out
    return dict(line.split() for line in out.splitlines())


async def test_the_image_is_read_only_but_workdir_and_tmp_are_writable(box: Any) -> None:
    assert await writes(box, "/", "/etc", "/opt/episodes", "/work", "/tmp") == {
        "/": "EROFS",
        "/etc": "EROFS",
        "/opt/episodes": "EROFS",
        "/work": "ok",
        "/tmp": "ok",
    }


async def test_root_cannot_write_the_image_either_and_read_only_false_opens_it(
    engine: Any,
) -> None:
    # EROFS for root too: the mount refuses, not merely the file modes.
    async with started(user="root") as box:
        assert (await py(box, "import os; print(os.getuid())"))[1].strip() == "0"
        assert await writes(box, "/", "/work") == {"/": "EROFS", "/work": "ok"}
    async with started(user="root", read_only=False) as box:
        assert await writes(box, "/", "/work") == {"/": "ok", "/work": "ok"}


async def test_open_files_are_bounded_not_the_engines_default(box: Any) -> None:
    """RLIMIT_NOFILE is `OPEN_FILES`, not the engine's default (often 1,048,576):
    as in the sandbox (issue 40 b)."""
    from episodes.runtimes.base import OPEN_FILES

    code = "import resource; print(*resource.getrlimit(resource.RLIMIT_NOFILE))"
    rc, out = await py(box, code)
    assert rc == 0 and [int(n) for n in out.split()] == [OPEN_FILES, OPEN_FILES]


async def test_processes_run_as_the_unprivileged_box_user(box: Any) -> None:
    code, out = await py(box, "import os; print(os.getuid(), os.getgid(), os.getcwd())")
    assert code == 0 and out.split() == [str(BOX_UID), str(BOX_UID), "/work"]


async def test_no_capabilities_and_no_privilege_gain(box: Any, engine: Any) -> None:
    code, status = await py(box, "print(open('/proc/self/status').read())")
    assert code == 0, status
    fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    assert fields["CapEff"].strip() == fields["CapPrm"].strip() == "0000000000000000"
    assert fields["CapAmb"].strip() == "0000000000000000"
    assert fields["NoNewPrivs"].strip() == "1"
    # Only the worker's control execs (root) get anything: CAP_KILL, for sweeps.
    host = engine.api.inspect_container(box.name)["HostConfig"]
    assert host["CapDrop"] == ["ALL"] and host["CapAdd"] == ["KILL"]


async def test_a_fork_loop_stops_at_the_pids_limit(engine: Any) -> None:
    async with started(pids_limit=32) as box:
        code, out = await py(
            box,
            """
            import errno, os, time
            n = 0
            try:
                while n < 1000:
                    if os.fork() == 0:
                        time.sleep(60)
                        os._exit(0)
                    n += 1
            except OSError as e:
                print(errno.errorcode[e.errno], n)
            """,
        )
        assert code == 0, out
        name, forked = out.split()
        assert name == "EAGAIN" and 0 < int(forked) < 32


@pytest.fixture
def host_listener() -> Iterator[int]:
    """A TCP port the host answers on, on every address."""
    server = socket.create_server(("0.0.0.0", 0))
    try:
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # reachable from the host itself
        yield port
    finally:
        server.close()


def host_address() -> str:
    """An IPv4 address of the host other than loopback (the bridge's gateway, the LAN)."""
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family == socket.AF_INET and not a.address.startswith("127."):
                return a.address
    pytest.skip("the host has no non-loopback IPv4 address")


async def test_no_network_but_the_boxs_own_loopback(box: Any, host_listener: int) -> None:
    code, out = await py(box, "import os; print(*sorted(os.listdir('/sys/class/net')))")
    assert code == 0 and out.split() == ["lo"]
    connect = """
        import errno, socket, sys
        s = socket.socket()
        s.settimeout(5)
        try:
            s.connect((sys.argv[1], int(sys.argv[2])))
            print("connected")
        except OSError as e:
            print(errno.errorcode.get(e.errno, "timeout"))
        """
    for address, expected in [("127.0.0.1", "ECONNREFUSED"), (host_address(), "ENETUNREACH")]:
        proc = await box.open_process(
            ["python3", "-c", textwrap.dedent(connect), address, str(host_listener)]
        )
        out = (await asyncio.wait_for(proc.stdout.read(), T)).decode().strip()
        assert await proc.wait() == 0
        assert out == expected, (address, out, errno.errorcode)


async def test_the_sweep_ends_the_box_users_and_the_relays_processes(engine: Any) -> None:
    async with started() as box:
        # A box-user daemon that left its session, and a process as the relay's user.
        code, _ = await py(
            box,
            """
            import os, time
            if os.fork() == 0:
                os.setsid()
                if os.fork() == 0:
                    time.sleep(300)
                os._exit(0)
            """,
        )
        assert code == 0
        relay = await box.open_relay(["sleep", "300"])
        # The box user cannot signal the relay (another uid, no CAP_KILL)...
        code, out = await py(
            box,
            f"""
            import errno, os
            try:
                os.kill({relay._pid}, 9)
                print("killed")
            except OSError as e:
                print(errno.errorcode[e.errno])
            """,
        )
        assert out.strip() == "EPERM"
        # ...the worker's sweep can, and ends the daemon too.
        assert await box.sweep()
        assert await asyncio.wait_for(relay.wait(), T) != 0
        code, out = await py(
            box,
            """
            import os
            mine = os.getpid()
            for p in os.listdir('/proc'):
                if p.isdigit() and int(p) not in (1, mine):
                    print(open(f'/proc/{p}/cmdline', 'rb').read().replace(b'\\0', b' '))
            """,
        )
        assert "300" not in out, out
