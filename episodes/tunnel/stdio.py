"""Worker end of the stdio tunnel: a remote box's loopback ports -> the session's services.

For boxes on another machine (Modal, Prime): `StdioTunnel.start` runs the in-box end
(`episodes/tunnel/stdio_relay.py`, sent as source: the box needs only `python3`) as a
process in the box, reads the box-loopback port it listens on for each service, and
from then on connects every connection the box opens to that service's address on
the worker (the tool bridge, the model proxy). Both ends run the same `Mux`.

What it costs: every byte goes through the runtime's exec channel (one process's
stdin and stdout), so a model call pays that channel's latency both ways; one slow
reader stalls the others (no per-connection flow control: these are short HTTP
exchanges). The bearer tokens are checked by the services as on any other path.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from pathlib import Path

from episodes.errors import TunnelFailed
from episodes.json_depth import text_too_deep
from episodes.runtimes.base import Runtime, RuntimeProcess
from episodes.tunnel import stdio_relay
from episodes.tunnel.stdio_relay import CLOSE, FrameTooLarge, Mux

log = logging.getLogger(__name__)

# Sent as `python3 -I -c SOURCE`: nothing to install in the box.
RELAY_SOURCE = Path(stdio_relay.__file__).read_text(encoding="utf-8")
READY_TIMEOUT_S = 30.0
# The in-box end's first line is ~100 bytes: a box that sends more without a newline is
# not running it (and would otherwise be buffered whole).
READY_LINE_MAX_BYTES = 64 * 1024


class StdioTunnel:
    """One session's tunnel: box-loopback ports for `services` (name -> (host, port))."""

    def __init__(
        self,
        services: dict[str, tuple[str, int]],
        *,
        max_connections: int = 64,
        on_fault: Callable[[str], None] | None = None,
    ) -> None:
        """`max_connections`: open at once (more are closed at once); `on_fault`: told
        once, in one line, if the box breaks the tunnel's protocol (it stops then)."""
        self.services = services
        self.max_connections = max_connections
        self.on_fault = on_fault
        self.fault: str | None = None
        self.ports: dict[str, int] = {}  # in the box
        self._proc: RuntimeProcess | None = None
        self._buffer = bytearray()
        self._mux = Mux(self._write, on_open=self._open)
        self._tasks: set[asyncio.Task[None]] = set()
        self._feeding: asyncio.Task[None] | None = None

    async def start(self, runtime: Runtime) -> dict[str, int]:
        """Start the in-box end; the box-loopback port of each service."""
        argv = [runtime.box_python, "-I", "-c", RELAY_SOURCE]
        for name in self.services:
            argv += ["--listen", name]
        self._proc = await runtime.open_process(argv, {}, None)
        try:
            line = await asyncio.wait_for(self._ready_line(), READY_TIMEOUT_S)
            if text_too_deep(line):  # json.loads would recurse per level
                raise ValueError("the ready line nests too deep")
            ready = json.loads(line)
            self.ports = {name: int(ready["ports"][name]) for name in self.services}
        except (TimeoutError, ValueError, KeyError, TypeError) as e:
            why = await self._stderr_tail()
            await self.stop()
            raise TunnelFailed(
                "harness.runtime: the box could not start the tunnel to the session's "
                f"tools and model ({type(e).__name__}); its image needs python3 on the "
                f"PATH. Its stderr: {why or '(empty)'}"
            ) from None
        self._feeding = asyncio.create_task(self._mux.feed(self._read_exactly))
        self._feeding.add_done_callback(self._fed)
        return dict(self.ports)

    def _fed(self, task: asyncio.Task[None]) -> None:
        """The stream from the box ended: a broken frame is the harness's fault."""
        if task.cancelled() or not isinstance(task.exception(), FrameTooLarge):
            return
        self.fault = f"protocol error on the stdio tunnel: {task.exception()}"
        self._mux.close_all()
        self._buffer = bytearray()
        if self.on_fault is not None:
            self.on_fault(self.fault)

    async def stop(self) -> None:
        """Close every connection and end the in-box process. Idempotent."""
        if self._feeding is not None:
            self._feeding.cancel()
        for task in list(self._tasks):
            task.cancel()
        self._mux.close_all()
        proc, self._proc = self._proc, None
        if proc is not None:
            with contextlib.suppress(Exception):
                await proc.kill()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(proc.wait(), 5)

    # -- the stream ------------------------------------------------------------------

    async def _write(self, data: bytes) -> None:
        if self._proc is None:
            raise ConnectionResetError("the tunnel is stopped")
        await self._proc.write(data)

    async def _fill(self) -> bool:
        assert self._proc is not None
        chunk = await self._proc.stdout.read(64 * 1024)
        self._buffer += chunk
        return bool(chunk)

    async def _ready_line(self) -> str:
        while b"\n" not in self._buffer:
            if len(self._buffer) > READY_LINE_MAX_BYTES:
                raise ValueError("the in-box end sent no ready line")
            if not await self._fill():
                raise ValueError("the in-box end exited before it was ready")
        line, _, rest = bytes(self._buffer).partition(b"\n")
        self._buffer = bytearray(rest)
        return line.decode("utf-8", errors="replace")

    async def _read_exactly(self, n: int) -> bytes:
        while len(self._buffer) < n:
            if self._proc is None or not await self._fill():
                raise EOFError
        data = bytes(self._buffer[:n])
        del self._buffer[:n]
        return data

    async def _stderr_tail(self) -> str:
        if self._proc is None:
            return ""
        with contextlib.suppress(Exception):
            data = await asyncio.wait_for(self._proc.stderr.read(2000), 1)
            # One line: the error is shown as one (a traceback's last words matter most).
            return " ".join(data.decode("utf-8", errors="replace").split())[-300:]
        return ""

    # -- a connection the box opened ---------------------------------------------------

    async def _open(self, conn: int, service: str) -> None:
        address = self.services.get(service)
        try:
            if address is None:
                raise ConnectionRefusedError(f"no service {service!r}")
            if len(self._mux.conns) >= self.max_connections:
                # harness.limits.connections: each holds a socket and a pump on the worker.
                raise ConnectionRefusedError(f"{self.max_connections} connections already open")
            reader, writer = await asyncio.open_connection(*address)
        except OSError as e:
            log.warning("tunnel: connection %d to %s failed: %s", conn, service, e)
            with contextlib.suppress(OSError):  # the in-box end may be gone too
                await self._mux.send(conn, CLOSE)
            return
        self._mux.add(conn, writer)
        task = asyncio.create_task(self._mux.pump(conn, reader))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
