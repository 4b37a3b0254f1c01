"""The inference fleet as one worker sees it: upstreams, their load, health and limits.

One `Fleet` per event loop (a worker's sessions share it, like the pooled client in
episodes/model/sender.py). It keeps one `Replica` per upstream base URL, whatever
specs name it:

- load: the calls in flight to it and the calls waiting for a place, over its weight
  (ties go to the one with fewer sessions sticking to it, then to the first listed);
- an adaptive concurrency limit (episodes/model/limiter.py): a 429 or 503 halves it
  (AIMD, once per wave), latency rising well above its long-term average pulls it down
  (a gradient limiter after Netflix's Gradient2), each other success adds 1/limit,
  up to the spec's `max_concurrency`; calls over the limit wait in the worker
  (`acquire`), first come first served;
- the policy version of its weights (`UpstreamSpec.policy_version`): the latest
  declared (`policy_version_at`) among the specs its sessions started with, read by
  every session's next call record, so a trainer that pushes weights to a replica
  and dispatches with the new version tells the sessions already running there
  (episodes/model/record.py);
- health: a refused connection ejects it at once, `EJECT_AFTER` failures in a row
  (5xx, timeouts, broken connections) too; an ejection lasts `EJECT_S`, doubling with
  each one in a row up to `MAX_EJECT_S`. When it ends the replica takes calls again (the
  probe, one call at a time): a success clears its record, a failure ejects it again,
  for longer.

A session's `Route` holds its affinity: its first call goes to the least-loaded healthy
replica among the spec's upstreams, and it stays there (the server's prefix cache holds
its conversation) until that replica is ejected or gives up on a call; then its next
attempt moves to the least-loaded healthy one. With no healthy replica left the one
due back first is tried anyway: `model_error` only when none can serve.

While most of a worker's sessions wait on the fleet (`saturated()`), the worker takes
no new episodes (workers/backpressure.py): boxes are the scarce thing.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from urllib.parse import urlsplit, urlunsplit

from episodes.model.limiter import AdaptiveLimit
from episodes.types.model import ModelSpec, UpstreamSpec

EJECT_AFTER = 3  # failures in a row (any session's) that eject a replica
EJECT_S = 2.0
MAX_EJECT_S = 60.0


def display_url(base_url: str) -> str:
    """The base URL as records show it: no user info, no query."""
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


class Replica:
    """One upstream, as this worker sees it."""

    def __init__(self, base_url: str, ceiling: int) -> None:
        self.base_url = base_url
        self.chat_url = base_url.rstrip("/") + "/chat/completions"
        self.name = display_url(base_url)
        self.adaptive = AdaptiveLimit(ceiling)
        self.in_flight = 0
        self.backing_off = 0  # calls sleeping after a 429 / 503
        self.sessions = 0  # routes sticking to it
        self._waiters: deque[asyncio.Future[None]] = deque()
        self.failures = 0  # in a row
        self.ejections = 0  # in a row
        self.ejected_until = 0.0
        # The version of the weights it serves, as the trainer last told this worker
        # (`UpstreamSpec.policy_version`; `Fleet.replica`): None until one does.
        self.policy_version: int | None = None
        self.declared: tuple[float, int] | None = None  # (policy_version_at, version)
        # Counts, for tests, benchmarks and metrics.
        self.served = 0
        self.throttled = 0
        self.failed = 0

    @property
    def limit(self) -> float:
        return self.adaptive.limit

    @property
    def ceiling(self) -> int:
        return self.adaptive.ceiling

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def load(self, weight: float) -> float:
        return (self.in_flight + self.waiting) / weight

    def healthy(self, now: float) -> bool:
        """Not ejected; once an ejection ends, one call at a time probes it."""
        if now < self.ejected_until:
            return False
        return self.ejections == 0 or self.in_flight + self.waiting == 0

    # -- the limit ------------------------------------------------------------------------

    async def acquire(self) -> None:
        """A place under the limit (waits in line while it is full)."""
        if self.in_flight < self.adaptive.places and not self._waiters:
            self.in_flight += 1
            return
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        except BaseException:
            if fut.done() and not fut.cancelled():
                self.release()  # handed a place while being cancelled: pass it on
            elif fut in self._waiters:  # `_wake` may have dropped it already
                self._waiters.remove(fut)
            raise

    def release(self) -> None:
        self.in_flight -= 1
        self._wake()

    def _wake(self) -> None:
        while self._waiters and self.in_flight < self.adaptive.places:
            fut = self._waiters.popleft()
            if not fut.done():
                self.in_flight += 1
                fut.set_result(None)

    # -- outcomes -------------------------------------------------------------------------

    def succeeded(self, rtt: float | None = None) -> None:
        """A call answered 2xx, its head `rtt` seconds after it was sent (its place still
        held: `in_flight` counts it)."""
        self.answered()
        self.adaptive.succeeded(rtt, self.in_flight)
        self._wake()

    def answered(self) -> None:
        """A call answered with the caller's own mistake (a 4xx other than 429): the
        upstream is up, but the answer says nothing of its load. Not a latency sample:
        quick rejections would pull the baseline down and real calls would look queued."""
        self.served += 1
        self.failures = self.ejections = 0
        self.ejected_until = 0.0

    def throttle(self, sent_at: float) -> None:
        """A 429 / 503: halve the limit, once per wave of calls."""
        self.throttled += 1
        self.adaptive.throttled(sent_at, asyncio.get_running_loop().time())

    def failure(self, *, refused: bool) -> None:
        self.failed += 1
        self.failures += 1
        if refused or self.failures >= EJECT_AFTER:
            self.eject()

    def eject(self) -> None:
        now = asyncio.get_running_loop().time()
        if now < self.ejected_until:
            return  # already out
        self.ejected_until = now + min(EJECT_S * 2**self.ejections, MAX_EJECT_S)
        self.ejections += 1


class Fleet:
    """The replicas of one worker's loop, by base URL."""

    def __init__(self) -> None:
        self.replicas: dict[str, Replica] = {}

    def replica(self, up: UpstreamSpec) -> Replica:
        r = self.replicas.get(up.base_url)
        if r is None:
            r = self.replicas[up.base_url] = Replica(up.base_url, up.max_concurrency)
        elif r.ceiling != up.max_concurrency:
            r.adaptive.set_ceiling(up.max_concurrency)  # the newest spec's ceiling
        if up.policy_version is not None:
            # The latest declaration, not the latest session: a session restarted (or
            # started late) from an older spec must not take the weights back in time.
            declared = (
                up.policy_version_at if up.policy_version_at is not None else -math.inf,
                up.policy_version,
            )
            if r.declared is None or declared > r.declared:
                r.declared, r.policy_version = declared, up.policy_version
        return r

    def saturated(self) -> bool:
        """Most of the sessions routed here have a call waiting on the fleet (for a
        place under a limit, or after a 429 / 503): starting more episodes would only
        lengthen the queue (workers/backpressure.py stops taking new ones meanwhile)."""
        replicas = list(self.replicas.values())  # a copy: metrics read it from a thread
        sessions = sum(r.sessions for r in replicas)
        held = sum(r.waiting + r.backing_off for r in replicas)
        return held > 0 and 2 * held >= sessions


_fleets: dict[asyncio.AbstractEventLoop, Fleet] = {}


def all_replicas() -> list[Replica]:
    """Every replica of this process's fleets (for metrics)."""
    return [r for f in list(_fleets.values()) for r in list(f.replicas.values())]


def saturated() -> bool:
    """Any of this process's fleets (a worker has one: its loop's) is saturated."""
    return any(f.saturated() for loop, f in list(_fleets.items()) if not loop.is_closed())


def fleet() -> Fleet:
    """The running loop's fleet (made on first use)."""
    loop = asyncio.get_running_loop()
    f = _fleets.get(loop)
    if f is None:
        for old in [k for k in _fleets if k.is_closed()]:
            del _fleets[old]
        f = _fleets[loop] = Fleet()
    return f


class Route:
    """One session's way to the fleet: its upstreams and the one it sticks to."""

    def __init__(self, spec: ModelSpec) -> None:
        f = fleet()
        self.choices = [(f.replica(up), up.weight) for up in spec.targets()]
        self.current: Replica | None = None
        self.moves = 0

    @property
    def replicas(self) -> list[Replica]:
        return [r for r, _ in self.choices]

    def pick(self, given_up: set[Replica]) -> Replica | None:
        """The replica for the next attempt, not one the call `given_up` on (None: all)."""
        now = asyncio.get_running_loop().time()
        cur = self.current
        if cur is not None and cur not in given_up and cur.healthy(now):
            return cur
        open_ = [(r, w) for r, w in self.choices if r not in given_up]
        healthy = [(r, w) for r, w in open_ if r.healthy(now)]
        if healthy:
            # Drained ones (weight 0) only when nothing else is healthy.
            routable = [(r, w) for r, w in healthy if w > 0] or [(r, 1.0) for r, _ in healthy]
            chosen = min(routable, key=lambda rw: (rw[0].load(rw[1]), rw[0].sessions / rw[1]))[0]
        elif cur is not None and cur not in given_up:
            chosen = cur  # nothing healthy: stay and try
        elif open_:
            chosen = min(open_, key=lambda rw: rw[0].ejected_until)[0]
        else:
            return None
        if chosen is not cur:
            if cur is not None:
                cur.sessions -= 1
                self.moves += 1
            chosen.sessions += 1
            self.current = chosen
        return chosen

    def close(self) -> None:
        if self.current is not None:
            self.current.sessions -= 1
            self.current = None
