"""The harness wire protocol and process control (host side), plus the harness SDK.

Exports resolve lazily: `from episodes.harness import sdk` inside a harness process
must not pull in pydantic or the runtimes, and importing this package never runs
anything of `sdk`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from episodes.errors import ProtocolError
    from episodes.harness.native import NativeDriver
    from episodes.harness.protocol import PacketDecoder, encode, read_packet

_EXPORTS = {
    "NativeDriver": "episodes.harness.native",
    "PacketDecoder": "episodes.harness.protocol",
    "encode": "episodes.harness.protocol",
    "read_packet": "episodes.harness.protocol",
    "ProtocolError": "episodes.errors",
}

__all__ = ["NativeDriver", "PacketDecoder", "ProtocolError", "encode", "read_packet"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
