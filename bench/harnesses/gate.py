"""A light harness for density runs: turn 0 waits for a gate file, then it stamps like stamp.py.

Runs without site-packages (`python -I -S gate.py`): it loads the stdlib-only SDK
file directly, so each of a thousand processes stays small and starts fast.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "episodes" / "harness"))
import sdk  # episodes/harness/sdk.py, stdlib only

GATE = os.environ.get("GATE_FILE", "")


def handle(turn, message, emit):
    if turn == 0 and GATE:
        while not os.path.exists(GATE):
            time.sleep(0.5)
    return {"echo": message, "t_ns": time.monotonic_ns()}


if __name__ == "__main__":
    sdk.serve(handle)
