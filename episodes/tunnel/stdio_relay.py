"""In-box end of the stdio tunnel: loopback ports in a remote box -> the worker's services.

A Modal sandbox or a Prime VM runs on another machine: it cannot reach the worker's
loopback, and no directory is shared with it. What every runtime does give is a
process with stdin and stdout. This program, started in the box by the worker
(`episodes.tunnel.stdio`), listens on one box-loopback port per service and carries
each connection over its own stdin/stdout; the worker's end connects it to the tool
bridge or the model proxy. It never reads or changes the traffic: the bearer tokens
still travel in every request and the services check them.

Stdlib only, no imports from this package, Python 3.8+: the worker sends this file's
source as `python3 -I -c <source> --listen mcp --listen model`, so nothing needs to be
installed in the box but a `python3`.

Its stdout is first one line, then frames in both directions:

    {"type": "ready", "ports": {"mcp": 41234, "model": 41235}}
    frame = HEADER (connection id u32, kind u8, payload length u32, big-endian) + payload

Kinds: OPEN (box -> worker: a client connected to the named service, payload = the
name), DATA, EOF (the sender's side will send no more: half-close), CLOSE (the
connection is gone, either side). It ends when its stdin closes or on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import itertools
import json
import signal
import struct
import sys
from collections.abc import Awaitable, Callable

HEADER = struct.Struct(">IBI")
OPEN, DATA, EOF, CLOSE = 1, 2, 3, 4
CHUNK = 48 * 1024
# Both ends send frames of at most CHUNK bytes. A header announcing more (its length
# field goes to 4 GiB) is a broken or hostile other end: the stream ends there, before
# any of it is read, rather than waiting to hold it whole.
MAX_FRAME_BYTES = 1024 * 1024


class FrameTooLarge(ValueError):
    """A frame header announced more than MAX_FRAME_BYTES: the tunnel's stream is broken."""


class Mux:
    """Connections multiplexed over one byte stream; both ends of the tunnel run it.

    `write` sends bytes to the other end. A connection's local socket is added with
    `add` and pumped with `pump`; frames from the other end go in through `feed`.
    Each direction ends with an EOF frame (a half-close); a connection is dropped
    once both directions have ended, or at once on CLOSE or a socket error."""

    def __init__(
        self,
        write: Callable[[bytes], Awaitable[None]],
        on_open: Callable[[int, str], Awaitable[None]] | None = None,
    ) -> None:
        self._write = write
        self._on_open = on_open
        self._lock = asyncio.Lock()
        self.conns: dict[int, asyncio.StreamWriter] = {}
        self._ended: dict[int, set[str]] = {}

    async def send(self, conn: int, kind: int, payload: bytes = b"") -> None:
        async with self._lock:  # whole frames, one at a time, on the shared stream
            await self._write(HEADER.pack(conn, kind, len(payload)) + payload)

    def add(self, conn: int, writer: asyncio.StreamWriter) -> None:
        self.conns[conn] = writer
        self._ended[conn] = set()

    async def pump(self, conn: int, reader: asyncio.StreamReader) -> None:
        """The local socket's bytes to the other end, then EOF (CLOSE on an error)."""
        try:
            while True:
                data = await reader.read(CHUNK)
                if not data:
                    break
                await self.send(conn, DATA, data)
        except (ConnectionError, OSError):
            await self.drop(conn, tell=True)
            return
        await self.send(conn, EOF)
        self._end(conn, "local")

    async def feed(self, read_exactly: Callable[[int], Awaitable[bytes]]) -> None:
        """Frames from the other end to the local sockets, until its stream ends.
        Raises FrameTooLarge (before reading its payload) for a frame over the cap."""
        while True:
            try:
                conn, kind, size = HEADER.unpack(await read_exactly(HEADER.size))
                if size > MAX_FRAME_BYTES:
                    raise FrameTooLarge(
                        f"a tunnel frame of {size} bytes exceeds the maximum of {MAX_FRAME_BYTES}"
                    )
                payload = await read_exactly(size) if size else b""
            except (asyncio.IncompleteReadError, EOFError):
                return
            if kind == OPEN:
                if self._on_open is not None:
                    await self._on_open(conn, payload.decode("utf-8", "replace"))
                continue
            writer = self.conns.get(conn)
            if writer is None:
                continue
            try:
                if kind == DATA:
                    writer.write(payload)
                    await writer.drain()
                elif kind == EOF:
                    if writer.can_write_eof():
                        writer.write_eof()
                    self._end(conn, "remote")
                elif kind == CLOSE:
                    await self.drop(conn)
            except (ConnectionError, OSError):
                await self.drop(conn, tell=True)

    async def drop(self, conn: int, tell: bool = False) -> None:
        writer = self.conns.pop(conn, None)
        self._ended.pop(conn, None)
        if writer is not None:
            writer.close()
        if tell:
            with contextlib.suppress(Exception):
                await self.send(conn, CLOSE)

    def close_all(self) -> None:
        for conn in list(self.conns):
            self.conns.pop(conn).close()
        self._ended.clear()

    def _end(self, conn: int, side: str) -> None:
        ended = self._ended.get(conn)
        if ended is None:
            return
        ended.add(side)
        if len(ended) == 2:
            self._ended.pop(conn, None)
            writer = self.conns.pop(conn, None)
            if writer is not None:
                writer.close()


async def run(services: list[str], host: str = "127.0.0.1") -> None:
    loop = asyncio.get_running_loop()
    stdin = asyncio.StreamReader(limit=2**22)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin.buffer)
    transport, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, sys.stdout.buffer
    )
    out = asyncio.StreamWriter(transport, protocol, None, loop)

    async def write(data: bytes) -> None:
        out.write(data)
        await out.drain()

    mux = Mux(write)
    ids = itertools.count(1)

    async def accept(name: str, reader: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        conn = next(ids)
        mux.add(conn, w)
        await mux.send(conn, OPEN, name.encode())
        await mux.pump(conn, reader)

    servers, ports = [], {}
    for name in services:
        server = await asyncio.start_server(functools.partial(accept, name), host=host, port=0)
        servers.append(server)
        ports[name] = server.sockets[0].getsockname()[1]
    await write((json.dumps({"type": "ready", "ports": ports}) + "\n").encode())
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    reading = asyncio.ensure_future(mux.feed(stdin.readexactly))
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait([reading, stopping], return_when=asyncio.FIRST_COMPLETED)
    for server in servers:
        server.close()
    mux.close_all()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the in-box end of the stdio tunnel")
    parser.add_argument("--listen", action="append", required=True, help="a service name")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    args = parser.parse_args(argv)
    asyncio.run(run(args.listen, args.host))
    return 0


if __name__ == "__main__":
    sys.exit(main())
