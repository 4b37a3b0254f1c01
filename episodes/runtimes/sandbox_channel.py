"""The worker's end of a sandbox box's control socket: requests to the box's agent
(`sandbox_init`), its replies and the exits it reports (`SandboxRuntime` is one)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import socket
from typing import Any

from episodes.runtimes import sandbox_agent
from episodes.runtimes.sandbox_process import SandboxProcess

_REPLY_TIMEOUT_S = 60.0


class AgentChannel:
    """The control channel's state and its reader: one per box."""

    id: str
    _sock: socket.socket | None
    _buf: bytes
    _next_id: int
    _replies: dict[int, asyncio.Future[dict[str, Any]]]
    _procs: dict[int, SandboxProcess]
    _exits: dict[int, int]
    _ready: asyncio.Future[None] | None
    _send_lock: asyncio.Lock

    def _on_readable(self) -> None:
        assert self._sock is not None
        try:
            data = self._sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._lost()
            return
        self._buf += data
        while b"\n" in self._buf:
            line, self._buf = self._buf.split(b"\n", 1)
            try:
                self._dispatch(json.loads(line))
            except (ValueError, TypeError, KeyError):
                continue  # the agent runs in the box: nothing it says may break the worker

    def _dispatch(self, msg: dict[str, Any]) -> None:
        if msg.get("ready") and self._ready is not None and not self._ready.done():
            self._ready.set_result(None)
        elif "exit" in msg:
            pid, code = int(msg["exit"]), int(msg["code"])
            if pid in self._procs:
                self._procs[pid]._exited(code)
            else:
                self._exits[pid] = code
        elif "id" in msg:
            fut = self._replies.pop(int(msg["id"]), None)
            if fut is not None and not fut.done():
                fut.set_result(msg)

    def _lost(self) -> None:
        """The agent is gone (the box died or was stopped): every process with it."""
        if self._sock is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(self._sock.fileno())
            self._sock.close()
        self._sock = None
        gone = ConnectionError(f"sandbox {self.id} is gone")
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(gone)
        for fut in self._replies.values():
            if not fut.done():
                fut.set_exception(gone)
        self._replies.clear()
        for proc in self._procs.values():
            proc._exited(-signal.SIGKILL)

    async def _request(self, msg: dict[str, Any], fds: tuple[int, ...] = ()) -> dict[str, Any]:
        if self._sock is None:
            raise RuntimeError(f"sandbox runtime {self.id} is not running")
        self._next_id += 1
        data = sandbox_agent.frame({**msg, "id": self._next_id})  # ValueError before anything waits
        fut = asyncio.get_running_loop().create_future()
        self._replies[self._next_id] = fut
        async with self._send_lock:
            await self._send(data, fds)
        try:
            return await asyncio.wait_for(fut, _REPLY_TIMEOUT_S)
        except (ConnectionError, TimeoutError) as e:
            raise RuntimeError(f"sandbox runtime {self.id} does not answer: {e}") from None

    async def _send(self, data: bytes, fds: tuple[int, ...]) -> None:
        loop = asyncio.get_running_loop()
        anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, bytes(_int_array(fds)))] if fds else []
        while data:
            sock = self._sock
            if sock is None:
                raise RuntimeError(f"sandbox runtime {self.id} is not running")
            try:
                sent = sock.sendmsg([data], anc)
            except BlockingIOError:
                ready = loop.create_future()
                loop.add_writer(sock.fileno(), ready.set_result, None)
                try:
                    await ready
                finally:
                    loop.remove_writer(sock.fileno())
                continue
            except OSError as e:
                raise RuntimeError(f"sandbox runtime {self.id} is gone: {e}") from None
            data, anc = data[sent:], []  # the fds went with the first byte


def _int_array(fds: tuple[int, ...]) -> Any:
    import array

    return array.array("i", fds)
