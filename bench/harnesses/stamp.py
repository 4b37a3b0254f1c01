"""Echo harness that stamps each reply with the harness's monotonic clock (ns).

Set STAMP_DELAY_MS to make each turn take that long (a stand-in for model time).

CLOCK_MONOTONIC is system-wide on Linux, so the bench can subtract stamps taken in
this process from stamps taken in the worker. Stdlib + the harness SDK only.
"""

from __future__ import annotations

import os
import time
from typing import Any

from episodes.harness import sdk

# Simulated model time per turn (ms), for measuring under slow turns.
DELAY_S = float(os.environ.get("STAMP_DELAY_MS", "0")) / 1000


def handle(turn: int, message: Any, emit: Any) -> Any:
    if DELAY_S:
        time.sleep(DELAY_S)
    return {"echo": message, "t_ns": time.monotonic_ns()}


if __name__ == "__main__":
    sdk.serve(handle)
