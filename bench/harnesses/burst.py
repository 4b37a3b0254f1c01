"""Harness that streams BURST_EVENTS `event` packets in each turn, then replies.

A stand-in for an agent that reports every step (thinking, tool calls, output lines):
what the worker pays per harness event. Stdlib + the harness SDK only.
"""

from __future__ import annotations

import os
from typing import Any

from episodes.harness import sdk

EVENTS = int(os.environ.get("BURST_EVENTS", "1000"))
TEXT = "x" * int(os.environ.get("BURST_EVENT_BYTES", "64"))


def handle(turn: int, message: Any, emit: Any) -> Any:
    for i in range(EVENTS):
        emit({"kind": "log", "i": i, "text": TEXT})
    return {"echo": message, "events": EVENTS}


if __name__ == "__main__":
    sdk.serve(handle)
