"""The worker's end of a sandbox box's control socket: requests to the box's agent
(`sandbox.box_init`), its replies and the exits it reports (`SandboxRuntime` is one)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import socket
from typing import Any

from episodes.runtimes.sandbox import agent as sandbox_agent
from episodes.runtimes.sandbox.process import SandboxProcess

_REPLY_TIMEOUT_S = 60.0


class AgentChannel:
    """The control channel's state and its reader: one per box. The box (a subclass)
    uses it through the public methods below, never its state."""

    id: str

    def __init__(self) -> None:
        self._sock: socket.socket | None = None
        self._buf = b""
        self._next_id = 0
        self._replies: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._procs: dict[int, SandboxProcess] = {}
        self._exits: dict[int, int] = {}  # exits reported before their spawn reply was seen
        self._ready: asyncio.Future[None] | None = None
        self._send_lock = asyncio.Lock()

    def expect_agent(self) -> None:
        """Before the box starts: its agent's ready message is awaited from now on."""
        self._ready = asyncio.get_running_loop().create_future()

    def attach(self, sock: socket.socket) -> None:
        """The worker's end of the control socket, read from now on."""
        sock.setblocking(False)
        self._sock = sock
        asyncio.get_running_loop().add_reader(sock.fileno(), self._on_readable)

    async def agent_ready(self, timeout: float) -> None:
        """Returns once the agent said it is ready; TimeoutError, or ConnectionError
        when the box died first."""
        assert self._ready is not None
        await asyncio.wait_for(asyncio.shield(self._ready), timeout)

    @property
    def connected(self) -> bool:
        return self._sock is not None

    @property
    def processes(self) -> list[SandboxProcess]:
        return list(self._procs.values())

    def track(self, proc: SandboxProcess) -> None:
        """A process the agent started: its exit is reported to it (at once if the
        agent reported it already, or the box is gone)."""
        # Long-lived (pooled) boxes open many processes: forget the fully stopped ones.
        self._procs = {p: pr for p, pr in self._procs.items() if not pr.swept}
        pid = proc.box_pid
        self._procs[pid] = proc
        if pid in self._exits:
            proc.exited(self._exits.pop(pid))
        elif self._sock is None:
            proc.exited(-signal.SIGKILL)

    def close_channel(self) -> None:
        """The box is gone: so is every process of it."""
        if self._sock is not None:
            self._lost()

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
                self._procs[pid].exited(code)
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
            proc.exited(-signal.SIGKILL)

    async def request(self, msg: dict[str, Any], fds: tuple[int, ...] = ()) -> dict[str, Any]:
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
