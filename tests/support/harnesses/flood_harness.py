"""A harness that floods its session's model proxy (issue 28), for the hostile suite
(tests/workers/test_hostile.py). Stdlib and the harness SDK only.

Run by file path: `python flood_harness.py [idle=N] [bodies=M] [tag=...]`. At turn 0 it
opens N idle connections to the proxy (held, never written to) and M that send a
request head without the token announcing a 60 MiB body and then push that body as
fast as the proxy takes it. It echoes every message; what it opened and pushed goes
to stderr (the worker's log).
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the checkout's root

from episodes.harness import sdk

MIB = 1024 * 1024
held: list[socket.socket] = []
pushed = [0]


def _address() -> tuple[str, int]:
    url = urlsplit(os.environ["OPENAI_BASE_URL"])
    return url.hostname or "127.0.0.1", url.port or 80


def _push(address: tuple[str, int]) -> None:
    """A tokenless request announcing 60 MiB, its body pushed until the proxy hangs up."""
    try:
        s = socket.create_connection(address, timeout=5)
        s.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
            % (60 * MIB)
        )
        block = b"x" * MIB
        for _ in range(60):
            s.sendall(block)
            pushed[0] += len(block)
    except OSError:
        pass  # refused and closed: what the proxy should do


def flood(idle: int, bodies: int) -> None:
    address = _address()
    for _ in range(idle):
        try:
            held.append(socket.create_connection(address, timeout=5))
        except OSError:
            break
    threads = [threading.Thread(target=_push, args=(address,)) for _ in range(bodies)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)


def main(argv: list[str]) -> None:
    opts = dict(arg.split("=", 1) for arg in argv)
    idle, bodies = int(opts.get("idle", "300")), int(opts.get("bodies", "8"))

    def handle(turn, message, emit):
        if turn == 0:
            started = time.monotonic()
            flood(idle, bodies)
            took = time.monotonic() - started
            print(
                f"flood: opened {len(held)}, pushed {pushed[0]} B in {took:.1f} s", file=sys.stderr
            )
        return message

    sdk.serve(handle)


if __name__ == "__main__":
    main(sys.argv[1:])
