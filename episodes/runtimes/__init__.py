"""Runtimes: where a harness process lives (a box). Each backend is registered once in
`backends` (how to build it, how to destroy its orphans); SDK-backed ones import lazily.
Their configs are in `episodes.types.runtime`."""

from __future__ import annotations

from episodes.runtimes.backends import make_runtime
from episodes.runtimes.base import ByteStream, Runtime, RuntimeProcess

__all__ = ["ByteStream", "Runtime", "RuntimeProcess", "make_runtime"]
