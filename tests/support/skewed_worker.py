"""`episodes worker` whose group activities read a wall clock SKEW seconds ahead.

    python tests/support/skewed_worker.py SKEW worker --address ... --task-queue ...

Only `activities.group`'s clock moves (`run_group` reads it for its `group_timeout_s`
deadline): a test sets a timeout no real run reaches on the first worker and lets the
retry on this one find it passed, so nothing is timed.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root


class SkewedClock:
    def __init__(self, skew_s: float) -> None:
        self.skew_s = skew_s

    def time(self) -> float:
        return time.time() + self.skew_s

    @staticmethod
    def monotonic() -> float:
        return time.monotonic()


if __name__ == "__main__":
    from activities import group

    group.time = SkewedClock(float(sys.argv[1]))  # type: ignore[assignment]
    sys.argv = [sys.argv[0], *sys.argv[2:]]
    from episodes.cli.main import main

    main()
