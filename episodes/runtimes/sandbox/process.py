"""One process of a bubblewrap box, seen from the worker (see `runtime`).

`sandbox.box_init` in the box started it with the three pipe ends the worker sent; the
worker keeps the other ends as plain asyncio pipes. Signals go through the box's
agent (`AgentChannel.request`): the pid is the box's, not the host's.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import signal
from typing import Any, Protocol

from episodes.runtimes.base import RuntimeProcess

_STREAM_LIMIT = 64 * 1024


class Agent(Protocol):
    """What a process needs of its box (a `SandboxRuntime`): whether it was stopped,
    and a request to its agent."""

    @property
    def stopped(self) -> bool: ...

    async def request(self, msg: dict[str, Any], fds: tuple[int, ...] = ()) -> dict[str, Any]: ...


class _StdinProtocol(asyncio.streams.FlowControlMixin):
    """The write end's protocol: flow control (drain) and a close waiter for the writer."""

    def __init__(self) -> None:
        super().__init__()
        self._closed = asyncio.get_running_loop().create_future()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if not self._closed.done():
            self._closed.set_result(None)

    def _get_close_waiter(self, stream: asyncio.StreamWriter) -> asyncio.Future[None]:
        return self._closed


class SandboxProcess(RuntimeProcess):
    """One process of the box: plain pipes on the worker's side, its pid in the box."""

    def __init__(self, box: Agent, pid: int, stdin: int, stdout: int, stderr: int):
        self._box = box
        self._pid = pid
        self._exit: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.swept = False  # group SIGKILLed after the leader exited: never signal it again
        self._fds = (stdin, stdout, stderr)
        self._out = asyncio.StreamReader(limit=_STREAM_LIMIT)
        self._err = asyncio.StreamReader(limit=_STREAM_LIMIT)
        self._stdin: asyncio.StreamWriter | None = None
        self._transports: list[asyncio.BaseTransport] = []

    async def connect(self) -> None:
        loop = asyncio.get_running_loop()
        for reader, fd in ((self._out, self._fds[1]), (self._err, self._fds[2])):
            protocol = asyncio.StreamReaderProtocol(reader)
            rt, _ = await loop.connect_read_pipe(
                functools.partial(_same, protocol), open(fd, "rb", 0)
            )
            self._transports.append(rt)
        wt, wp = await loop.connect_write_pipe(_StdinProtocol, open(self._fds[0], "wb", 0))
        self._transports.append(wt)
        self._stdin = asyncio.StreamWriter(wt, wp, None, loop)

    @property
    def stdout(self) -> asyncio.StreamReader:
        return self._out

    @property
    def stderr(self) -> asyncio.StreamReader:
        return self._err

    @property
    def pid(self) -> int | None:
        return self._pid

    @property
    def box_pid(self) -> int:
        """Its pid in the box (never None: the agent reported it)."""
        return self._pid

    @property
    def returncode(self) -> int | None:
        return self._exit.result() if self._exit.done() else None

    @property
    def finished(self) -> bool:
        return self.swept or self._box.stopped

    def exited(self, code: int) -> None:
        if not self._exit.done():
            self._exit.set_result(code)

    async def write(self, data: bytes) -> None:
        w = self._stdin
        if w is None or w.is_closing() or self._exit.done():
            raise BrokenPipeError(f"stdin of process {self._pid} is closed")
        w.write(data)
        await w.drain()

    async def close_stdin(self) -> None:
        w = self._stdin
        if w is None or w.is_closing():
            return
        w.close()
        with contextlib.suppress(ConnectionError, BrokenPipeError):
            await w.wait_closed()

    async def wait(self) -> int:
        return await asyncio.shield(self._exit)

    def release(self) -> None:
        for t in self._transports:
            t.close()

    async def _signal(self, sig: int) -> None:
        if self.swept or self._box.stopped:
            return
        if self._exit.done():
            if sig != signal.SIGKILL:
                return
            self.swept = True  # once: the group id may be reused in the box later
        try:
            await self._box.request({"op": "signal", "pid": self._pid, "sig": int(sig)})
        except RuntimeError:
            # The box's agent is gone (the box was ended, at a limit say): so is every
            # process of it, this one included.
            pass

    async def terminate(self) -> None:
        await self._signal(signal.SIGTERM)

    async def kill(self) -> None:
        await self._signal(signal.SIGKILL)


def _same(protocol: asyncio.StreamReaderProtocol) -> asyncio.StreamReaderProtocol:
    return protocol
