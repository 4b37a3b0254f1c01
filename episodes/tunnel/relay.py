"""In-box relay: loopback TCP inside a box without a network -> the bridge's Unix socket.

Stdlib only, no imports from this package: copy it anywhere, or run it as

    python3 /opt/episodes/episodes/tunnel/relay.py --socket /run/episodes-mcp/mcp.sock
    python3 -m episodes.tunnel.relay --socket ... [--port 0] [--host 127.0.0.1]

A container with `network: none` has only its own loopback, so it cannot reach
the worker's 127.0.0.1. The worker's `ToolBridge` also listens on a Unix socket
in a private per-session directory that the runtime bind-mounts into the box;
this relay listens on the box's loopback and copies bytes both ways, one Unix
connection per TCP connection. It never reads or changes the traffic: the bearer
token still travels in every request and the bridge checks it.

When it listens it prints one line to stdout and flushes it:

    {"type": "ready", "host": "127.0.0.1", "port": 41234, "socket": "..."}

then serves until SIGTERM/SIGINT (or its box stops). Because it opens the socket
per connection, a box that outlives a session (a pooled box) keeps its relay: the
next session's bridge binds the same socket path.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys

# Where a box has this file: the project's image keeps the package at /opt/episodes
# (scripts/build-image.sh), the runtime bundle under its own `Runtime.box_episodes`,
# the local sandbox binds the worker's copy here.
RELAY_IN_BOX = "/opt/episodes/episodes/tunnel/relay.py"
DEFAULT_SOCKET = "/run/episodes-mcp/mcp.sock"
CHUNK = 64 * 1024


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            data = await reader.read(CHUNK)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        # Pass the end of one direction on (HTTP clients and servers half-close).
        with contextlib.suppress(OSError, RuntimeError):
            if writer.can_write_eof():
                writer.write_eof()


async def _serve_one(
    socket_path: str, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter
) -> None:
    try:
        upstream_r, upstream_w = await asyncio.open_unix_connection(socket_path)
    except OSError as e:
        # No bridge (yet, or any more): the client sees its connection closed.
        print(f"relay: cannot connect to {socket_path}: {e}", file=sys.stderr, flush=True)
        client_w.close()
        return
    try:
        await asyncio.gather(_pipe(client_r, upstream_w), _pipe(upstream_r, client_w))
    finally:
        for w in (upstream_w, client_w):
            w.close()


async def run(socket_path: str, host: str = "127.0.0.1", port: int = 0) -> None:
    server = await asyncio.start_server(
        lambda r, w: _serve_one(socket_path, r, w), host=host, port=port
    )
    bound = server.sockets[0].getsockname()
    ready = {"type": "ready", "host": bound[0], "port": bound[1], "socket": socket_path}
    print(json.dumps(ready), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--socket", default=DEFAULT_SOCKET, help="the bridge's Unix socket")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (0: a free one)")
    args = parser.parse_args(argv)
    asyncio.run(run(args.socket, args.host, args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
