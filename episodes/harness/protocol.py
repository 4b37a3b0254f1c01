"""The harness wire protocol: length-prefixed JSON packets over stdio (docs/protocol.md).

Each packet is an 8-byte big-endian unsigned length, then that many bytes of one
UTF-8 JSON object with a string `type`. This module is the host side: framing,
an incremental decoder that never buffers more than one packet, and the one place
that knows which fields each packet type must carry.
"""

from __future__ import annotations

import json
import struct
from collections import deque
from typing import Any

from episodes.errors import ProtocolError
from episodes.json_depth import text_too_deep, too_deep_message
from episodes.runtimes.base import ByteStream
from episodes.types.tuning import DEFAULT_MAX_PACKET_BYTES

HEADER = struct.Struct(">Q")
READ_CHUNK_BYTES = 64 * 1024

# Required fields per packet type (beyond `type`). Extra fields are allowed so the
# protocol can grow without breaking old hosts or harnesses.
HARNESS_PACKETS: dict[str, tuple[str, ...]] = {
    "ready": (),
    "event": ("turn", "event"),
    "reply": ("turn", "message"),
    "error": ("turn", "error"),
    # The answer to `resume` (only from a harness whose `ready` said `resume: true`).
    "resumed": (),
}
HOST_PACKETS: dict[str, tuple[str, ...]] = {
    "turn": ("turn", "message"),
    # A restarted episode's recorded turns, instead of replaying them one by one.
    "resume": ("transcript",),
    "shutdown": (),
}


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


# One decoder for every packet: json.loads with a hook builds a new one per call.
_JSON = json.JSONDecoder(parse_constant=_reject_constant)


def strict_json(data: bytes | str) -> Any:
    """Parse JSON text that must be standard JSON (no NaN/Infinity). Raises ValueError
    (UnicodeDecodeError included). Callers bound the depth first (json_depth)."""
    return _JSON.decode(data.decode("utf-8") if isinstance(data, bytes) else data)


def encode(obj: dict[str, Any]) -> bytes:
    """One packet: header + compact UTF-8 JSON. Raises ValueError/TypeError for non-JSON data."""
    if not isinstance(obj, dict):
        raise TypeError(f"a packet must be a JSON object, got {type(obj).__name__}")
    body = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    data = body.encode("utf-8")
    return HEADER.pack(len(data)) + data


def decode_body(body: bytes) -> dict[str, Any]:
    """Parse one packet body into a JSON object with a string `type`, or raise ProtocolError."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ProtocolError(f"packet is not valid UTF-8: {e}") from None
    # Before parsing: json.loads recurses per level, and a RecursionError is no ProtocolError.
    if text_too_deep(body):
        raise ProtocolError(too_deep_message("packet"))
    try:
        obj = _JSON.decode(text)
    except ValueError as e:
        raise ProtocolError(f"packet is not JSON: {e}: {_preview(body)}") from None
    if not isinstance(obj, dict):
        raise ProtocolError(f"packet must be a JSON object, got {type(obj).__name__}")
    kind = obj.get("type")
    if not isinstance(kind, str):
        raise ProtocolError(f"packet has no string 'type' field: {_preview(body)}")
    return obj


def _validate(obj: dict[str, Any], allowed: dict[str, tuple[str, ...]], sender: str) -> None:
    kind = obj["type"]
    if kind not in allowed:
        raise ProtocolError(
            f"unknown packet type {kind!r} from the {sender} (expected one of {sorted(allowed)})"
        )
    missing = [f for f in allowed[kind] if f not in obj]
    if missing:
        raise ProtocolError(f"{kind!r} packet is missing field(s): {', '.join(missing)}")
    if "turn" in allowed[kind] and (type(obj["turn"]) is not int or obj["turn"] < 0):
        raise ProtocolError(f"{kind!r} packet has a bad turn index: {obj['turn']!r}")
    if kind == "error" and not isinstance(obj["error"], str):
        raise ProtocolError("'error' packet field 'error' must be a string")


def validate_harness_packet(obj: dict[str, Any]) -> dict[str, Any]:
    """Check a packet the harness sent (ready/event/reply/error); returns it unchanged."""
    _validate(obj, HARNESS_PACKETS, "harness")
    return obj


def validate_host_packet(obj: dict[str, Any]) -> dict[str, Any]:
    """Check a packet the host sent (turn/shutdown); returns it unchanged."""
    _validate(obj, HOST_PACKETS, "host")
    return obj


def _preview(data: bytes | bytearray, n: int = 24) -> str:
    head = bytes(data[:n])
    return repr(head) + ("..." if len(data) > n else "")


def _text_hint(data: bytearray) -> str:
    header = bytes(data[: HEADER.size])
    if header.isascii() and all(32 <= c < 127 or c in b"\t\r\n" for c in header):
        return "; text where a length header belongs: is the harness printing to stdout?"
    return ""


class PacketDecoder:
    """Incremental decoder: feed bytes as they arrive, get whole validated packets back.

    The buffer never holds more than one partial packet: the length header is checked
    against `max_packet_bytes` before any of the body is kept. After an error the
    decoder is dead (the stream cannot be resynchronised); packets decoded before
    the error are still delivered first, and the error is raised on the next call.
    """

    def __init__(
        self, max_packet_bytes: int = DEFAULT_MAX_PACKET_BYTES, *, validate=validate_harness_packet
    ) -> None:
        self.max_packet_bytes = max_packet_bytes
        self._validate = validate
        self._buf = bytearray()
        self._ready: deque[dict[str, Any]] = deque()
        self._error: ProtocolError | None = None
        self.consumed = 0  # bytes of every whole packet so far (headers included)

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete packet held right now."""
        return len(self._buf)

    @property
    def failed(self) -> bool:
        return self._error is not None

    def pop_ready(self) -> dict[str, Any] | None:
        """A packet decoded ahead (one read often carries many), or None: no I/O needed."""
        return self._ready.popleft() if self._ready else None

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        """Consume `data`; return every packet it completes. Raises ProtocolError."""
        self._absorb(data)
        out = list(self._ready)
        self._ready.clear()
        if not out and self._error is not None:
            raise self._error
        return out

    def _absorb(self, data: bytes) -> None:
        if self._error is not None:
            return  # a broken stream is not buffered any further
        self._buf += data
        try:
            while len(self._buf) >= HEADER.size:
                (size,) = HEADER.unpack_from(self._buf)
                if size > self.max_packet_bytes:
                    raise ProtocolError(
                        f"packet of {size} bytes exceeds the maximum of {self.max_packet_bytes}"
                        f" (stream starts {_preview(self._buf)}{_text_hint(self._buf)})"
                    )
                end = HEADER.size + size
                if len(self._buf) < end:
                    return
                body = bytes(self._buf[HEADER.size : end])
                del self._buf[:end]
                self.consumed += end
                obj = decode_body(body)
                self._ready.append(self._validate(obj) if self._validate else obj)
        except ProtocolError as e:
            self._error = e
            self._buf.clear()


async def read_packet(
    stream: ByteStream, decoder: PacketDecoder, chunk_bytes: int = READ_CHUNK_BYTES
) -> dict[str, Any] | None:
    """Next packet from `stream`, or None on a clean end of stream between packets.

    Reads at most `chunk_bytes` at a time, so memory stays bounded whatever the
    other side writes. Safe to cancel: partial data stays in the decoder.
    """
    while not decoder._ready:
        if decoder._error is not None:
            raise decoder._error
        data = await stream.read(chunk_bytes)
        if not data:
            if decoder.buffered:
                raise ProtocolError(
                    f"stream ended mid-packet (short read: {decoder.buffered} bytes of an"
                    " incomplete packet)"
                )
            return None
        decoder._absorb(data)
    return decoder._ready.popleft()
