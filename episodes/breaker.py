"""A worker whose boxes cannot start stops taking provisions for a while.

Without it a broken worker is a black hole: its Docker engine is down (or its
cloud credentials expired), every provision it polls fails in milliseconds, and it
polls the next one first, so it takes the retries of the whole fleet and fails them
too. After `threshold` provisions in a row failed because the worker's runtime is
unavailable (`RuntimeUnavailable`: no engine, no SDK, no credentials; not the
agent's outcome, not a spec's missing image, which would let one bad spec pause the
whole fleet), the breaker opens: the worker's provision slots give out no permit
(`workers/backpressure.py`) for `cooldown_s`, doubled at each failure while open up
to `max_cooldown_s`. Once the cooldown ends the worker takes provisions again; the
first success closes the breaker. Live sessions keep running meanwhile.

Temporal-free: the provision activity reports to it, the slot supplier reads it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class ProvisionBreaker:
    def __init__(
        self,
        threshold: int = 3,
        cooldown_s: float = 30.0,
        max_cooldown_s: float = 300.0,
        *,
        clock: Callable[[], float] = time.monotonic,
        name: str = "this worker",
    ) -> None:
        if threshold < 1:
            raise ValueError("threshold must be at least 1")
        self.threshold = threshold
        self.cooldown_s = cooldown_s
        self.max_cooldown_s = max_cooldown_s
        self.name = name
        self._clock = clock
        self.failures = 0  # in a row
        self.opened = 0  # times the breaker opened, for metrics and tests
        self.last_error = ""
        self._until = 0.0
        self._cooldown = cooldown_s

    def is_open(self) -> bool:
        """True while the worker should not take provisions."""
        return self._clock() < self._until

    def success(self) -> None:
        if self.failures >= self.threshold:
            log.warning("%s: a provision succeeded: taking provisions again", self.name)
        self.failures = 0
        self._until = 0.0
        self._cooldown = self.cooldown_s

    def failure(self, error: BaseException) -> None:
        """A provision failed for a reason of this worker (its runtime, its box)."""
        self.failures += 1
        self.last_error = f"{type(error).__name__}: {error}".splitlines()[0][:300]
        if self.failures < self.threshold:
            return
        self._until = self._clock() + self._cooldown
        self.opened += 1
        log.warning(
            "%s: %d provisions in a row failed (last: %s); not taking provisions for %.0f s",
            self.name,
            self.failures,
            self.last_error,
            self._cooldown,
        )
        self._cooldown = min(self._cooldown * 2, self.max_cooldown_s)
