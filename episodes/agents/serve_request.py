"""What the model proxy's HTTP/1.1 server (`episodes/agents/serve.py`) hands its handler
and takes from its owner: a parsed `Request` and how it is answered, the `Bounds` of one
server, and the `Refusal` an `admit` callback raises on a request's head."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from episodes.agents.serve import _Conn

_PHRASES = {s.value: s.phrase.encode() for s in HTTPStatus}


def _phrase(status: int) -> bytes:
    return _PHRASES.get(status) or b"Status"  # any status an upstream may answer


@dataclass(frozen=True)
class Bounds:
    """What one server (one session's endpoint) lets its clients hold."""

    max_body: int
    connections: int = 64
    held_bytes: int = 128 * 1024 * 1024
    idle_s: float = 60.0
    request_s: float = 30.0


class Refusal(Exception):
    """What `admit` answers to a request it will not serve: its status and message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


# `admit(method, path, headers)` runs on the head, before the body is read: it raises
# Refusal (answered at once, the connection closed) or returns.
Admit = Callable[[str, str, dict[str, str]], None]


class Request:
    """One parsed request; answer it with `respond`, or `start_stream` / `send` / `end`."""

    __slots__ = ("_conn", "_keep_alive", "answered", "body", "headers", "method", "path")

    def __init__(
        self,
        conn: _Conn,
        method: str,
        path: str,
        headers: dict[str, str],
        body: bytes,
        keep_alive: bool,
    ) -> None:
        self.method, self.path, self.headers, self.body = method, path, headers, body
        self._conn = conn
        self._keep_alive = keep_alive
        self.answered = False

    @property
    def gone(self) -> bool:
        """The client hung up (what is sent from now on goes nowhere)."""
        return self._conn.closed

    def respond(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        """The whole answer, in one write."""
        self.answered = True
        head = b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n%s\r\n" % (
            status,
            _phrase(status),
            content_type.encode("latin-1"),
            len(body),
            b"" if self._keep_alive else b"Connection: close\r\n",
        )
        self._conn.write(head + body)

    def start_stream(self, content_type: bytes = b"text/event-stream") -> None:
        """A 200 whose body follows in pieces (`send`), ended by `end`."""
        self.answered = True
        self._conn.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nCache-Control: no-cache\r\n"
            b"Transfer-Encoding: chunked\r\n%s\r\n"
            % (content_type, b"" if self._keep_alive else b"Connection: close\r\n")
        )

    def send(self, data: bytes) -> bool:
        """One piece of a stream; whether the client keeps up (False: it reads slower
        than we send: wait for `on_writable` before sending more). ConnectionResetError
        once the client hung up."""
        conn = self._conn
        if conn.closed:
            raise ConnectionResetError("the client hung up")
        if data:
            conn.transport.write(b"%x\r\n%b\r\n" % (len(data), data))  # type: ignore[union-attr]
        return not conn.paused

    def on_writable(self, callback: Callable[[], Any] | None) -> None:
        """Call `callback` when the client has read enough to send again (or hung up)."""
        self._conn.on_writable = callback

    def close(self) -> None:
        """Hang up on the client (what it has not read is dropped)."""
        conn = self._conn
        if conn.transport is not None and not conn.closed:
            conn.transport.abort()

    def end(self) -> None:
        if not self._conn.closed:
            self._conn.write(b"0\r\n\r\n")


Handler = Callable[[Request], Awaitable[None]]
