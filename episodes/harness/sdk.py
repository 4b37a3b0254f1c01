"""Write a harness in a few lines. Standard library only: copy this file anywhere.

    from episodes.harness import sdk      # or: import sdk (a copy of this file)

    def handle(turn, message, emit):
        emit({"thinking": "..."})         # optional: stream `event` packets
        return {"answer": 42}             # the `reply` packet; raising sends an `error` packet

    sdk.serve(handle)

It doubles as the reference implementation of the wire protocol (docs/protocol.md):
every packet is an 8-byte big-endian length, then that many bytes of one UTF-8 JSON
object. The harness sends `ready` once, then answers each `turn` with any number of
`event` packets and one `reply` (or `error`). `shutdown` or end of stdin means exit.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import sys
import threading
import traceback
from collections.abc import Callable

_HEADER = struct.Struct(">Q")


# libc's prctl, looked up once (a forked child must not load libraries).
_prctl: list[Callable[..., int]] = []


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies (best effort, no-op elsewhere).

    serve() calls it; after that it is also safe as
    `subprocess.Popen(..., preexec_fn=sdk.die_with_parent)` for long-lived children.
    """
    if sys.platform != "linux":
        return
    try:
        if not _prctl:
            import ctypes

            _prctl.append(ctypes.CDLL(None, use_errno=True).prctl)
        _prctl[0](1, signal.SIGKILL, 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _read_exact(stream, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = stream.read(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def read_packet(stream) -> dict | None:
    """One packet from a binary stream, or None at end of stream."""
    header = _read_exact(stream, _HEADER.size)
    if header is None:
        return None
    (size,) = _HEADER.unpack(header)
    body = _read_exact(stream, size)
    if body is None:
        return None
    return json.loads(body.decode("utf-8"))


def encode(packet: dict) -> bytes:
    body = json.dumps(packet, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    data = body.encode("utf-8")
    return _HEADER.pack(len(data)) + data


def serve(handle, *, setup=None, resume=None) -> None:
    """Run the harness loop on stdin/stdout until `shutdown` or end of stdin, then exit 0.

    `handle(turn, message, emit)` returns the reply (any JSON value); `emit(event)`
    streams an event for the current turn. `setup()` runs before `ready` is sent.
    `resume(transcript)`, when given, is announced in `ready` (`"resume": true`): a
    restarted episode then hands this fresh process the recorded turns, a list of
    `{"turn", "message", "reply"}`, instead of replaying them turn by turn; restore
    your state from it. Raising from it ends the process (the restore fails).
    """
    die_with_parent()
    # Keep the protocol pipes private: fds 0/1 become /dev/null and stderr, so a stray
    # print() -- or a child process inheriting fds 0/1 -- cannot corrupt the stream.
    proto_in = os.fdopen(os.dup(0), "rb")
    proto_out = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    lock = threading.Lock()

    def send(data: bytes) -> None:
        with lock:
            proto_out.write(data)
            proto_out.flush()

    if setup is not None:
        setup()
    send(encode({"type": "ready", "resume": True} if resume else {"type": "ready"}))
    while True:
        packet = read_packet(proto_in)
        if packet is None or packet.get("type") == "shutdown":
            break
        if packet.get("type") == "turn":
            send(_answer(handle, packet["turn"], packet.get("message"), send))
        elif packet.get("type") == "resume" and resume is not None:
            try:
                resume(packet.get("transcript") or [])
            except Exception:
                traceback.print_exc(file=sys.stderr)
                sys.stderr.flush()
                sys.exit(1)
            send(encode({"type": "resumed"}))
        else:
            print(f"harness sdk: ignoring unexpected packet {packet!r}", file=sys.stderr)
    sys.stderr.flush()
    sys.exit(0)


def _answer(handle, turn: int, message, send) -> bytes:
    """Run one turn; the encoded reply packet, or an error packet if `handle` raised."""
    answered = False

    def emit(event) -> None:
        if answered:
            raise RuntimeError(f"emit() after turn {turn} was answered")
        send(encode({"type": "event", "turn": turn, "event": event}))

    try:
        # Encoding inside the try: a reply that is not JSON becomes an error packet.
        reply = encode({"type": "reply", "turn": turn, "message": handle(turn, message, emit)})
    except Exception as e:
        traceback.print_exc(file=sys.stderr)
        reply = encode({"type": "error", "turn": turn, "error": f"{type(e).__name__}: {e}"})
    answered = True
    return reply
