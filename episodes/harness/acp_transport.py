"""ACP's stdio framing over a RuntimeProcess, as the SDK's message-level Transport.

The SDK's own stdio path wants an `asyncio.StreamReader`/`StreamWriter` pair, which a
Docker, Modal or Prime process does not have, and it logs and skips lines that are
not JSON. A harness that prints to stdout must end the episode with
`protocol_error`, not have its output silently dropped, so this transport reads the
runtime's byte stream itself: one JSON-RPC object per line, bounded in size, and the
first violation is kept in `fault` (and ends the stream, which fails pending calls).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from episodes.harness.budget import BudgetExceeded, StreamBudget
from episodes.harness.protocol import READ_CHUNK_BYTES, strict_json
from episodes.json_depth import text_too_deep, too_deep_message
from episodes.runtimes.base import RuntimeProcess


class RuntimeTransport:
    """`acp._transport.Transport` (send/receive/close of JSON-RPC dicts) over stdio."""

    def __init__(
        self, proc: RuntimeProcess, max_message_bytes: int, budget: StreamBudget | None = None
    ) -> None:
        self._proc = proc
        self._max = max_message_bytes
        # Every message counts, in a turn or between turns (the SDK reads all the time,
        # and queues updates for the next turn): past a budget, reading stops.
        self._budget = budget or StreamBudget()
        self._buf = bytearray()
        self._scanned = 0  # bytes of _buf known to hold no newline
        self._write_lock = asyncio.Lock()
        self.fault: str | None = None
        self.faulted = asyncio.Event()

    async def send(self, message: dict[str, Any]) -> None:
        data = (json.dumps(message, separators=(",", ":"), allow_nan=False) + "\n").encode()
        # One line per write, never interleaved: concurrent answers share stdin.
        async with self._write_lock:
            await self._proc.write(data)

    async def receive(self) -> dict[str, Any] | None:
        """The next message, or None at the end of stdout or after a violation."""
        while self.fault is None:
            newline = self._buf.find(b"\n", self._scanned)
            if newline < 0:
                self._scanned = len(self._buf)
                if len(self._buf) > self._max:
                    self._fail(f"a message of more than {self._max} bytes on stdout")
                    return None
                try:
                    chunk = await self._proc.stdout.read(READ_CHUNK_BYTES)
                except Exception:
                    chunk = b""
                if not chunk:
                    if self._buf.strip():
                        self._fail(f"stdout ended mid-message: {self._preview()}")
                    return None
                self._buf += chunk
                continue
            line = bytes(self._buf[:newline])
            del self._buf[: newline + 1]
            self._scanned = 0
            if len(line) > self._max:
                self._fail(f"a message of {len(line)} bytes exceeds the maximum {self._max}")
                return None
            try:
                self._budget.charge(len(line) + 1)
            except BudgetExceeded as e:
                self._fail(e.detail)
                return None
            if line.strip():
                return self._parse(line)
        return None

    async def close(self) -> None:
        # The process owns the pipes; the session stops it (closing stdin included).
        pass

    def _parse(self, line: bytes) -> dict[str, Any] | None:
        if text_too_deep(line):  # json.loads would recurse per level (RecursionError)
            self._fail(too_deep_message("a message on stdout"))
            return None
        try:
            message = strict_json(line)
        except ValueError:
            self._fail(f"not JSON on stdout: {line[:120]!r} (is the agent printing to stdout?)")
            return None
        if (
            not isinstance(message, dict)
            or message.get("jsonrpc") != "2.0"
            or not ("method" in message or "id" in message)
        ):
            self._fail(f"not a JSON-RPC 2.0 message: {line[:120]!r}")
            return None
        return message

    def _preview(self) -> str:
        return repr(bytes(self._buf[:120]))

    def _fail(self, why: str) -> None:
        self.fault = why
        self.faulted.set()
