"""The sandbox's in-box agent (issue 32): compiled where the worker has a C compiler,
else `python -I -S` on builtin modules only; either way the same protocol, and a box
whose agent no harness can take over."""

from __future__ import annotations

import ast
import asyncio
import errno
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from episodes.runtimes.sandbox import agent as sandbox_agent
from episodes.runtimes.sandbox import box_init as sandbox_init
from episodes.runtimes.sandbox.runtime import SandboxRuntime, bwrap_path

pytestmark = [
    pytest.mark.skipif(bwrap_path() is None, reason="bwrap is not installed"),
    pytest.mark.timeout(120),
]

# What an interpreter has built in or beside it: nothing whose import costs more than
# its own start (json, subprocess, threading, socket, signal, enum, re...).
BUILTIN = {"__future__", "_ctypes", "_signal", "_socket", "ctypes", "os", "resource"}
BUILTIN |= {"select", "sys", "time"}


_BUILT: dict[str, str | None] = {}  # "musl" / "cc" -> the agent it compiled


@pytest.fixture(params=["musl", "cc", "python"])
def agent(request, monkeypatch) -> str:
    """The box's agent: compiled with musl-gcc (what a worker that has it runs), with
    `cc` against glibc, or the Python one."""
    which = str(request.param)
    if which == "python":
        monkeypatch.setenv("EPISODES_SANDBOX_AGENT", "python")
        return which
    monkeypatch.delenv("EPISODES_SANDBOX_AGENT", raising=False)
    if which not in _BUILT:
        compilers = [
            c for c in sandbox_agent._compilers() if c[0].endswith("musl-gcc") == (which == "musl")
        ]
        if not compilers:
            pytest.skip(f"no {'musl-gcc' if which == 'musl' else 'C compiler'} on this worker")
        with monkeypatch.context() as m:
            m.setattr(sandbox_agent, "_compilers", lambda: compilers)
            m.setattr(sandbox_agent, "_compiled", {})
            _BUILT[which] = sandbox_agent.compiled()
        assert _BUILT[which] is not None, f"{compilers[0][0]} could not compile the agent"
    monkeypatch.setattr(sandbox_agent, "_compiled", {os.getpid(): _BUILT[which]})
    return "compiled"


def test_musl_compiles_the_agent_where_the_worker_has_it(monkeypatch):
    """musl's start has no `cpuid`s (each a hypervisor trap on a VM); an explicit $CC
    still comes first."""
    tools = {"cc": "/usr/bin/cc", "musl-gcc": "/usr/bin/musl-gcc", "clang": "/usr/bin/clang"}
    monkeypatch.setattr(shutil, "which", lambda name: tools.get(name))
    monkeypatch.delenv("CC", raising=False)
    first = [c[0] for c in sandbox_agent._compilers()]
    assert first == ["/usr/bin/musl-gcc", "/usr/bin/cc", "/usr/bin/cc"]
    monkeypatch.setenv("CC", "clang")
    assert [c[0] for c in sandbox_agent._compilers()][:2] == ["/usr/bin/clang", "/usr/bin/musl-gcc"]
    del tools["musl-gcc"]
    monkeypatch.delenv("CC")
    assert sandbox_agent._compilers() == [["/usr/bin/cc", "-static"], ["/usr/bin/cc"]]


async def _out(box: SandboxRuntime, argv: list[str], env: dict[str, str] | None = None, cwd=None):
    proc = await box.open_process(argv, env or {}, cwd)
    await proc.close_stdin()
    out, err = await asyncio.gather(proc.stdout.read(), proc.stderr.read())
    return await proc.wait(), out.decode(), err.decode()


def test_the_python_agent_imports_only_what_the_interpreter_has_built_in():
    tree = ast.parse(Path(sandbox_init.__file__).read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert names <= BUILTIN, names - BUILTIN


async def test_a_box_runs_the_compiled_agent_where_the_worker_can_compile_it(agent):
    box = SandboxRuntime()
    await box.start()
    try:
        rc, out, _ = await _out(box, ["/bin/cat", "/proc/2/cmdline"])
        assert rc == 0
        pid2 = out.split("\0")
        if agent == "compiled":
            assert pid2[0] == sandbox_agent.AGENT_IN_BOX
        else:
            assert pid2[:3] == [sys.executable, "-I", "-S"]
    finally:
        await box.stop()


async def test_either_agent_starts_signals_and_reports_as_the_other(agent):
    box = SandboxRuntime()
    await box.start()
    try:
        # PATH lookup in the process's own env, its cwd, its env and nothing else.
        env = {"PATH": "/nonexistent:/usr/bin:/bin", "X": "a=b c"}
        rc, out, _ = await _out(box, ["sh", "-c", 'pwd; echo "$X"; env | wc -l'], env, "/tmp")
        assert (rc, out.split("\n")[:2]) == (0, ["/tmp", "a=b c"])
        assert int(out.split("\n")[2]) <= 4  # X, PATH, and what sh sets (PWD, SHLVL)
        assert (await _out(box, ["sh", "-c", "exit 3"]))[0] == 3
        # A process of its own group: a signal reaches it, the exit says which.
        proc = await box.open_process(["sleep", "60"], {})
        await proc.terminate()
        assert await asyncio.wait_for(proc.wait(), 30) == -15
        # SIGPIPE as a program expects it (not ignored, as the Python agent's own is).
        rc, _, _ = await _out(box, ["sh", "-c", "yes | head -c1 >/dev/null; exit 0"])
        assert rc == 0
        with pytest.raises(FileNotFoundError):
            await box.open_process(["no-such-command-here"], {})
        with pytest.raises(PermissionError):
            await box.open_process(["/etc/passwd"], {})
        with pytest.raises(ValueError, match="null byte"):
            await box.open_process(["echo", "a\0b"], {})
        with pytest.raises(OSError) as cwd:
            await box.open_process(["true"], {}, "/no/such/dir")
        assert cwd.value.errno == errno.ENOENT
        # Many at once: every reply and every exit reaches its process.
        procs = await asyncio.gather(*(box.open_process(["true"], {}) for _ in range(20)))
        assert await asyncio.gather(*(p.wait() for p in procs)) == [0] * 20
        assert await box.sweep()
    finally:
        await box.stop()


async def test_no_harness_can_read_or_write_the_agents_memory(agent):
    """Non-dumpable: /proc/2/mem (how a same-user process would take its socket over)
    is closed to the box's processes."""
    box = SandboxRuntime()
    await box.start()
    try:
        code = "open('/proc/2/mem', 'rb')"
        rc, _, err = await _out(box, [sys.executable, "-c", code])
        assert rc == 1 and "PermissionError" in err
    finally:
        await box.stop()


async def test_a_relay_carries_bytes_and_half_closes_both_ways(agent):
    """What a session's services are reached through (episodes/tunnel/relay.py's
    contract): the ready line, then each loopback connection to the Unix socket."""
    from episodes.tunnel.relay import RELAY_IN_BOX

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = await reader.read()  # to the client's EOF (its half-close)
        writer.write(data.upper())
        await writer.drain()
        writer.close()

    box = SandboxRuntime()
    await box.start()
    try:
        assert box.channel_dir is not None
        host_dir, box_dir = box.channel_dir
        server = await asyncio.start_unix_server(echo, str(host_dir / "x.sock"))
        relay = await box.open_relay(
            ["python3", "-I", RELAY_IN_BOX, "--socket", f"{box_dir}/x.sock"]
        )
        ready = json.loads(await asyncio.wait_for(relay.stdout.readline(), 30))
        assert ready["type"] == "ready" and ready["host"] == "127.0.0.1"
        code = (
            "import socket, sys\n"
            f"s = socket.create_connection(('127.0.0.1', {ready['port']}))\n"
            "s.sendall(b'x' * 200000 + b'end'); s.shutdown(socket.SHUT_WR)\n"
            "got = b''\n"
            "while chunk := s.recv(65536):\n"
            "    got += chunk\n"
            "print(len(got), got[-3:].decode())\n"
        )
        outs = await asyncio.gather(*(_out(box, [sys.executable, "-c", code]) for _ in range(5)))
        assert [o[:2] for o in outs] == [(0, "200003 END\n")] * 5
        await relay.kill()
        server.close()
    finally:
        await box.stop()


async def test_a_bridge_that_stops_taking_connections_stalls_none_of_the_others(agent):
    """A harness that opens connections faster than the worker takes them (the
    bridge's backlog full) must not stall the relay's other connections: the compiled
    relay blocked in `connect` for as long as the backlog stayed full, every other
    connection of the session with it."""
    import socket
    import threading

    from episodes.tunnel.relay import RELAY_IN_BOX

    box = SandboxRuntime()
    await box.start()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stop = threading.Event()
    try:
        assert box.channel_dir is not None
        host_dir, box_dir = box.channel_dir
        listener.bind(str(host_dir / "x.sock"))
        listener.listen(1)

        def serve_one() -> None:  # takes the first connection only, then no other
            conn, _ = listener.accept()
            with conn:
                conn.settimeout(1)
                while not stop.is_set():
                    try:
                        data = conn.recv(100)
                    except TimeoutError:
                        continue
                    if not data:
                        return
                    conn.sendall(data.upper())

        threading.Thread(target=serve_one, daemon=True).start()
        relay = await box.open_relay(
            ["python3", "-I", RELAY_IN_BOX, "--socket", f"{box_dir}/x.sock"]
        )
        ready = json.loads(await asyncio.wait_for(relay.stdout.readline(), 30))
        code = (
            "import socket\n"
            f"addr = ('127.0.0.1', {ready['port']})\n"
            "first = socket.create_connection(addr, timeout=60)\n"
            "first.sendall(b'a'); assert first.recv(10) == b'A'\n"
            # Past the bridge's backlog: these wait in it, or are refused.
            "more = [socket.create_connection(addr) for _ in range(4)]\n"
            "first.sendall(b'b'); print(first.recv(10).decode())\n"
        )
        rc, out, err = await asyncio.wait_for(_out(box, [sys.executable, "-c", code]), 90)
        assert (rc, out) == (0, "B\n"), err
        await relay.kill()
    finally:
        stop.set()
        listener.close()
        await box.stop()
