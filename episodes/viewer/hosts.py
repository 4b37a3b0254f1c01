"""The viewer answers only to its own host names (DNS rebinding).

A web page the user opens can point a name of its own (`evil.example`) at 127.0.0.1
once the browser has loaded it, then read `http://evil.example:8234/api/...` as its
own origin: the transcripts on the user's loopback viewer. The browser still sends
`Host: evil.example`, so the viewer refuses any Host that is not one it serves on:
- bound to loopback (the default): `localhost`, `127.0.0.1`, `::1` and the bound address;
- bound to every address (`0.0.0.0`, `::`): those, any IP address, and this machine's
  own names (`socket.gethostname()`, its FQDN);
- bound to one address or name: that one.
The port is not checked (a tunnel or proxy may forward another one), nor a request
without a Host (no browser sends one). A refused request gets 403 and one line.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
_WILDCARDS = frozenset({"", "0.0.0.0", "::"})

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def host_name(header: str) -> str:
    """The name (or address) in a Host header, without its port or brackets."""
    header = header.strip().lower()
    if header.startswith("["):  # [::1]:8234
        return header[1:].split("]", 1)[0]
    if header.count(":") == 1:
        header = header.split(":", 1)[0]
    return header.rstrip(".")


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _is_loopback(name: str) -> bool:
    return name in LOOPBACK_NAMES or (_is_ip(name) and ipaddress.ip_address(name).is_loopback)


def allows(bound: str) -> Callable[[str], bool]:
    """Whether a Host header's name may reach a viewer bound to `bound`."""
    bound = host_name(bound) if bound not in _WILDCARDS else bound
    if bound in _WILDCARDS:
        own = {socket.gethostname().lower(), socket.getfqdn().lower()}
        return lambda name: name in LOOPBACK_NAMES or name in own or _is_ip(name)
    if _is_loopback(bound):
        return lambda name: name in LOOPBACK_NAMES or name == bound
    return lambda name: name == bound


def host_check(bound: str) -> Middleware:
    """An aiohttp middleware refusing requests for any other host (403)."""
    ok = allows(bound)

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        header = request.headers.get("Host")
        if header is not None and not ok(host_name(header)):
            return web.Response(
                status=403,
                text=f"this viewer serves {bound or '0.0.0.0'}, not Host {header[:100]!r} "
                "(a page of another site reaching it through DNS rebinding?); open it by "
                "the address `episodes view` printed\n",
            )
        return await handler(request)

    return check
