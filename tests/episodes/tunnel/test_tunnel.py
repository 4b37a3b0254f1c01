"""The stdio tunnel's byte semantics, with its in-box end as a real local process.

An echo server stands in for a service: bytes arrive whole and in order in both
directions, a half-close travels, connections are independent, a service that
refuses closes the box's connection, and stopping leaves nothing listening.
"""

from __future__ import annotations

import asyncio
import os

import pytest

from episodes.runtimes.subprocess import SubprocessRuntime
from episodes.tunnel.stdio import StdioTunnel

pytestmark = pytest.mark.timeout(60)


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()
    writer.close()  # after the client's EOF: the half-close came through


async def _roundtrip(port: int, payload: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(payload)
    await writer.drain()
    writer.write_eof()
    got = await reader.read()  # to EOF: the server closed after echoing everything
    writer.close()
    return got


async def test_bytes_half_close_and_parallel_connections_through_the_tunnel():
    server = await asyncio.start_server(_echo, "127.0.0.1", 0)
    refused = await asyncio.start_server(_echo, "127.0.0.1", 0)
    dead_port = refused.sockets[0].getsockname()[1]
    refused.close()
    await refused.wait_closed()
    runtime = SubprocessRuntime()
    await runtime.start()
    tunnel = StdioTunnel(
        {
            "echo": ("127.0.0.1", server.sockets[0].getsockname()[1]),
            "dead": ("127.0.0.1", dead_port),
        }
    )
    try:
        ports = await tunnel.start(runtime)
        assert set(ports) == {"echo", "dead"}
        big = os.urandom(3 * 1024 * 1024 + 7)  # many frames, not a multiple of a chunk
        assert await _roundtrip(ports["echo"], big) == big
        small = [f"conn {i} ".encode() * (i + 1) for i in range(12)]
        got = await asyncio.gather(*(_roundtrip(ports["echo"], p) for p in small))
        assert got == small
        # The worker's end cannot connect: the box's client sees its connection end.
        reader, writer = await asyncio.open_connection("127.0.0.1", ports["dead"])
        assert await asyncio.wait_for(reader.read(), 10) == b""
        writer.close()
        # Still serving after all that.
        assert await _roundtrip(ports["echo"], b"again") == b"again"
    finally:
        await tunnel.stop()
        await runtime.stop()
        server.close()
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", ports["echo"])


# -- what the box may send (issue 19) ----------------------------------------------------

# An in-box end that says it is ready, then announces a frame of 4 GiB - 1 and sends
# a little of it: the worker must not wait to hold it whole.
HOSTILE_END = r"""
import json, os, struct, sys, time
print(json.dumps({"type": "ready", "ports": {"echo": 1}}), flush=True)
os.write(1, struct.pack(">IBI", 1, 2, 2**32 - 1) + b"x" * 65536)
time.sleep(3600)
"""


async def test_a_frame_over_the_cap_is_a_tunnel_fault_not_an_allocation(monkeypatch):
    from episodes.tunnel import stdio as tunnel_module
    from episodes.tunnel.stdio_relay import MAX_FRAME_BYTES

    monkeypatch.setattr(tunnel_module, "RELAY_SOURCE", HOSTILE_END)
    faults: list[str] = []
    runtime = SubprocessRuntime()
    await runtime.start()
    tunnel = StdioTunnel({"echo": ("127.0.0.1", 9)}, on_fault=faults.append)
    try:
        await tunnel.start(runtime)
        deadline = asyncio.get_running_loop().time() + 30
        while not faults and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.02)
        assert faults == [tunnel.fault]
        assert f"exceeds the maximum of {MAX_FRAME_BYTES}" in faults[0]
        assert len(tunnel._buffer) <= MAX_FRAME_BYTES  # nothing of the frame is held
    finally:
        await tunnel.stop()
        await runtime.stop()


async def test_connections_past_the_cap_are_closed():
    server = await asyncio.start_server(_echo, "127.0.0.1", 0)
    runtime = SubprocessRuntime()
    await runtime.start()
    tunnel = StdioTunnel(
        {"echo": ("127.0.0.1", server.sockets[0].getsockname()[1])}, max_connections=2
    )
    held = []
    try:
        ports = await tunnel.start(runtime)
        for _ in range(2):  # open, and known open (an echo came back) before the next
            reader, writer = await asyncio.open_connection("127.0.0.1", ports["echo"])
            writer.write(b"hi")
            assert await asyncio.wait_for(reader.readexactly(2), 10) == b"hi"
            held.append(writer)
        reader, writer = await asyncio.open_connection("127.0.0.1", ports["echo"])
        assert await asyncio.wait_for(reader.read(), 10) == b""  # refused: closed
        writer.close()
        held.pop().close()
        # One closed: a new one is served again.
        deadline = asyncio.get_running_loop().time() + 10
        while len(tunnel._mux.conns) >= 2 and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.02)
        assert await _roundtrip(ports["echo"], b"again") == b"again"
    finally:
        for writer in held:
            writer.close()
        await tunnel.stop()
        await runtime.stop()
        server.close()


async def test_the_model_proxys_bounds_hold_through_the_tunnel():
    # Issue 28: the tunnel carries bytes; the proxy behind it judges the token on the
    # head and closes idle connections, and the box's end of each goes with it.
    from episodes.model.proxy import ModelProxy
    from episodes.types.harness import HarnessLimits
    from episodes.types.model import ModelSpec

    spec = ModelSpec(base_url="http://127.0.0.1:9/v1", model="m")
    proxy = ModelProxy(spec, upstream_key="k", limits=HarnessLimits(idle_timeout_s=0.3))
    runtime = SubprocessRuntime()
    await runtime.start()
    await proxy.start()
    assert proxy.port is not None
    tunnel = StdioTunnel({"model": ("127.0.0.1", proxy.port)})
    try:
        ports = await tunnel.start(runtime)
        reader, writer = await asyncio.open_connection("127.0.0.1", ports["model"])
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 60000000\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert head.startswith(b"HTTP/1.1 401 ")  # on the head: the body never sent
        writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", ports["model"])
        assert await asyncio.wait_for(reader.read(), 10) == b""  # idle: closed
        writer.close()
    finally:
        await tunnel.stop()
        await proxy.stop()
        await runtime.stop()
