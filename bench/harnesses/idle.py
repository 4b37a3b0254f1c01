"""The smallest idle-ish harness, for scale runs: it waits a think time, then answers.

Run as `python -I -S idle.py`: it imports nothing but built-in modules (`os`, `time`;
no `json`, no SDK), so each of a thousand boxes holds one small process. It speaks the
native wire protocol (docs/protocol.md) by hand: an 8-byte big-endian length, then a
compact JSON object.

Each turn but turn 0 it sleeps THINK_MS (uniform in [0.5, 1.5] x, a stand-in for model time;
0: answer at once) and replies `{"recv_ns", "send_ns", "start_ns", "pid"}`: when the
turn reached it, when it answered (CLOCK_MONOTONIC, system-wide on Linux, so the
benchmark subtracts them from stamps taken in the worker), when the process began, and
its pid (a small number inside a sandbox's pid namespace).
"""

import os
import time

START_NS = time.monotonic_ns()
THINK_S = float(os.environ.get("THINK_MS", "0")) / 1000


def _read(n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = os.read(0, n - len(data))
        if not chunk:
            raise SystemExit(0)  # end of stdin: the worker is done with us
        data += chunk
    return data


def _send(body: bytes) -> None:
    os.write(1, len(body).to_bytes(8, "big") + body)


def main() -> None:
    _send(b'{"type":"ready"}')
    while True:
        body = _read(int.from_bytes(_read(8), "big"))
        recv = time.monotonic_ns()
        if not body.startswith(b'{"type":"turn"'):
            if b'"type":"shutdown"' in body:
                return
            continue
        at = body.index(b'"turn":', 8) + 7
        end = at
        while body[end : end + 1].isdigit():
            end += 1
        turn = int(body[at:end])
        if THINK_S and turn:  # turn 0 answers at once: the episode is up
            time.sleep(THINK_S * (0.5 + int.from_bytes(os.urandom(2), "big") / 65536))
        send = time.monotonic_ns()
        reply = f'{{"recv_ns":{recv},"send_ns":{send},"start_ns":{START_NS},"pid":{os.getpid()}}}'
        _send(b'{"type":"reply","turn":%d,"message":%s}' % (turn, reply.encode()))


if __name__ == "__main__":
    main()
