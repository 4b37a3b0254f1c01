"""One upstream's adaptive concurrency limit: AIMD on 429 / 503, a gradient on latency.

The arithmetic only (no clock, no queue): `Replica` (episodes/model/fleet.py) holds
one, queues the calls past `places`, and reports each call's outcome here.

- **Overload said out loud (AIMD).** A 429 or 503 halves the limit, once per wave:
  only answers to calls sent after the last cut count (`throttled`).
- **Overload shown by latency (a gradient limiter).** After Netflix's
  concurrency-limits `Gradient2Limit` (github.com/Netflix/concurrency-limits,
  core/src/main/java/com/netflix/concurrency/limits/limit/Gradient2Limit.java): each
  call's latency feeds a short-term average (the last few calls) and a long-term one
  (the last 600, the baseline). When the short-term one (and the call itself) is
  more than `TOLERANCE` times the baseline, calls are queueing in the server; the gradient
  `TOLERANCE * long / short` (kept within [0.5, 1]) then pulls the limit down,
  smoothed: `limit <- limit * (1 - SMOOTHING * (1 - gradient))`. As in Gradient2, a
  long-term average far above the short-term one (latency back to normal after a long
  overload) is pulled down 5% per call, the first `WARMUP` calls only set the baseline,
  and a limit the worker does not use (fewer than half its places in flight) is not
  cut: the worker's calls are not what slows that server. Unlike Gradient2, a call
  that was itself quick never cuts (the short-term average lags the queue draining).
- **Growth.** A call that saw no queueing (and every success before the baseline is
  set, or with no latency measured) raises the limit by 1/limit: about one place per
  round of calls (Gradient2 grows by a queue-size term instead; the additive increase
  keeps one rule for recovering from both signals).

Only 2xx answers reach `succeeded`: a 4xx other than 429 is the caller's mistake,
often answered at once, and says nothing of the server's load (`Replica.answered`).

Always 1 <= limit <= ceiling (the upstream's `max_concurrency`).

Two limits of the latency signal, said where the fleet is documented
(docs/tools-and-models.md): the baseline is what the first calls saw, so a server
slow from the first call on is caught by its 429 / 503 only; and a call's latency is
the time to its answer's head, which for an unstreamed call includes generating all
its tokens (answers of very different lengths are noise the tolerance absorbs).

Written here rather than taken from PyPI: the adaptive-concurrency libraries there
(e.g. ace-concurrency, adaptive-concurrency, aimd-limiter) are single 0.1 releases,
and each brings its own queue, which would replace `Replica`'s (first come first
served, cancellation-safe, shared with routing and backpressure).
"""

from __future__ import annotations

import math

TOLERANCE = 2.0  # short-term latency over this many times the baseline: queueing
SMOOTHING = 0.2  # the share of the gradient's pull a call applies
MIN_GRADIENT = 0.5  # one call never asks for less than half the limit
LONG_WINDOW = 600  # calls in the baseline (Gradient2's default)
SHORT_WINDOW = 5  # calls in the short-term average
WARMUP = 10  # calls that only set the baseline


class ExpAvg:
    """An exponential moving average over about `window` samples; the plain mean of the
    first `warmup` ones (Gradient2's `ExpAvgMeasurement`)."""

    def __init__(self, window: int, warmup: int) -> None:
        self.alpha = 2.0 / (window + 1)
        self.warmup = warmup
        self.count = 0
        self.value = 0.0

    def add(self, sample: float) -> float:
        self.count += 1
        if self.count <= self.warmup:
            self.value += (sample - self.value) / self.count
        else:
            self.value += (sample - self.value) * self.alpha
        return self.value


class AdaptiveLimit:
    """How many calls to send one upstream at once (`places`), learnt from its answers."""

    def __init__(self, ceiling: int) -> None:
        self.ceiling = ceiling
        self.limit = float(ceiling)
        self.long_rtt = ExpAvg(LONG_WINDOW, WARMUP)
        self.short_rtt = ExpAvg(SHORT_WINDOW, 1)
        self._last_cut = -math.inf
        # Counts, for tests, benchmarks and metrics.
        self.latency_cuts = 0
        self.throttle_cuts = 0

    @property
    def places(self) -> int:
        return max(1, int(self.limit))

    def set_ceiling(self, ceiling: int) -> None:
        self.ceiling = ceiling
        self.limit = min(self.limit, float(ceiling))

    def succeeded(self, rtt: float | None, in_flight: int) -> None:
        """A call answered in `rtt` seconds (to its head; None: not measured) while
        `in_flight` calls (itself included) were out."""
        if rtt is not None and self._queueing(max(rtt, 1e-6), in_flight):
            gradient = max(MIN_GRADIENT, TOLERANCE * self.long_rtt.value / self.short_rtt.value)
            self.limit = max(1.0, self.limit * (1.0 - SMOOTHING * (1.0 - gradient)))
            self.latency_cuts += 1
        elif self.limit < self.ceiling:
            self.limit = min(float(self.ceiling), self.limit + 1.0 / self.limit)

    def _queueing(self, rtt: float, in_flight: int) -> bool:
        short = self.short_rtt.add(rtt)
        long = self.long_rtt.add(rtt)
        if long > 2 * short:  # back to normal after a long overload: catch up faster
            self.long_rtt.value *= 0.95
        if self.long_rtt.count <= WARMUP or 2 * in_flight < self.limit:
            return False
        return short > TOLERANCE * long and rtt > TOLERANCE * long

    def throttled(self, sent_at: float, now: float) -> None:
        """A 429 / 503 to a call sent at `sent_at`: halve the limit, once per wave (the
        calls sent before the last cut were sent under the old limit)."""
        if sent_at >= self._last_cut:
            self.limit = max(1.0, self.limit / 2)
            self._last_cut = now
            self.throttle_cuts += 1
