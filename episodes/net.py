"""Listening sockets for the session's loopback servers (tool bridge, model proxy).

Bound here rather than by the server so the port (port 0: any free one) is known
before anyone connects. Made with `IPPROTO_TCP` explicitly: asyncio turns Nagle off
(TCP_NODELAY) only on connections of sockets whose `proto` says TCP, and a socket
made as `socket.socket(AF_INET, SOCK_STREAM)` says 0. Without it every small
response waited out the peer's delayed ACK: ~40 ms per tool call, measured.
"""

from __future__ import annotations

import socket


def tcp_listener(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    return sock
