"""The local subprocess runtime: always available."""

from __future__ import annotations

import sys

from episodes.runtimes.base import Runtime

NAME = "subprocess"
PYTHON = [sys.executable]


def skip_reason() -> str | None:
    return None


def make_runtime() -> Runtime:
    from episodes.runtimes.subprocess import SubprocessRuntime

    return SubprocessRuntime()
