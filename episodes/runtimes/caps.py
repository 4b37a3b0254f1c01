"""A worker's caps on its boxes, per runtime: how many may be starting at once and how
many it may hold (issue 44 §2: Modal's limit on starting sandboxes, E2B's 429s, a
node's Docker capacity).

`BoxCaps.acquire(names)` waits for room on the first runtime of `names` that has it
and hands back a `Slot`: the box counts as starting until `Slot.started()` and as held
until `Slot.release()`. Waiters are served in the order they came, per runtime (one
that waits on several runtimes is served by whichever has room first); a waiter that
is cancelled takes nothing with it. `waiting` is how many wait now: the worker's slot
supplier stops taking provisions while one does (workers/backpressure.py).

Caps count the boxes episodes hold, from the moment one asks for its box until it gives
it back (stopped, or parked in a reuse pool: a parked box is bounded by `pool_max_idle`,
a warm one by `pool_max_warm`). They are per worker: a fleet-wide cap is the per-worker
cap times the workers.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from episodes.errors import BoxCapacity
from episodes.types.runtime import DEFAULT_BOX_CAPS, BoxCap

log = logging.getLogger("episodes.runtimes")


class Slot:
    """One box's place under its runtime's caps. Both methods are idempotent."""

    def __init__(self, gate: RuntimeGate) -> None:
        self.gate = gate
        self._starting = True
        self._held = True

    @property
    def runtime(self) -> str:
        return self.gate.name

    def started(self) -> None:
        """The box is up: it no longer counts as starting."""
        if self._starting:
            self._starting = False
            self.gate.starting -= 1
            self.gate.serve()

    def release(self) -> None:
        """The box is stopped or given back (or never started): its place is free."""
        self.started()
        if self._held:
            self._held = False
            self.gate.running -= 1
            self.gate.serve()


@dataclass(eq=False)
class _Waiter:
    """One `acquire` waiting, queued on each runtime it may use."""

    granted: asyncio.Future[Slot] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class RuntimeGate:
    """The counts and the queue of one runtime."""

    def __init__(self, name: str, cap: BoxCap) -> None:
        self.name = name
        self.cap = cap
        self.starting = 0
        self.running = 0  # held: starting or up
        self._queue: deque[_Waiter] = deque()

    def has_room(self) -> bool:
        cap = self.cap
        return (cap.running is None or self.running < cap.running) and (
            cap.starting is None or self.starting < cap.starting
        )

    def take(self) -> Slot:
        """A slot whatever the caps say (`try_take` and `serve` check them first)."""
        self.starting += 1
        self.running += 1
        return Slot(self)

    def try_take(self) -> Slot | None:
        """A slot now if there is room and nobody waits before us; else None."""
        self._drop_served()
        if self._queue or not self.has_room():
            return None
        return self.take()

    def serve(self) -> None:
        """Hand the room there is to the waiters, first come first."""
        self._drop_served()
        while self._queue and self.has_room():
            waiter = self._queue.popleft()
            if not waiter.granted.done():
                waiter.granted.set_result(self.take())
            self._drop_served()

    def _drop_served(self) -> None:
        """Waiters served by another runtime, or gone, leave the head of the queue."""
        while self._queue and self._queue[0].granted.done():
            self._queue.popleft()

    def enqueue(self, waiter: _Waiter) -> None:
        self._queue.append(waiter)

    def forget(self, waiter: _Waiter) -> None:
        try:
            self._queue.remove(waiter)
        except ValueError:
            pass


class BoxCaps:
    """The worker's gates, one per runtime (made on first use)."""

    def __init__(self, caps: Mapping[str, BoxCap] | None = None) -> None:
        """`caps`: per runtime name, over `DEFAULT_BOX_CAPS` field by field (what a cap
        sets, `none` included, replaces the default's; a runtime named in neither has
        no cap: it counts, it never waits)."""
        self.caps = dict(DEFAULT_BOX_CAPS)
        for name, cap in (caps or {}).items():
            given = {f: getattr(cap, f) for f in cap.model_fields_set}
            self.caps[name] = self.caps.get(name, BoxCap()).model_copy(update=given)
        self._gates: dict[str, RuntimeGate] = {}
        self.waiting = 0

    def gate(self, name: str) -> RuntimeGate:
        gate = self._gates.get(name)
        if gate is None:
            gate = self._gates[name] = RuntimeGate(name, self.caps.get(name, BoxCap()))
        return gate

    async def acquire(
        self,
        names: Iterable[str],
        *,
        on_wait: Callable[[], None] | None = None,
        max_wait_s: float | None = None,
    ) -> tuple[Slot, int]:
        """A slot on the first of `names` (runtime names, in order of preference) with
        room, and its index. With no room on any: `on_wait()`, then wait for the first
        to have room; after `max_wait_s` the first runtime's slot is taken over its cap
        (logged: served late rather than never)."""
        gates = [self.gate(n) for n in names]
        if not gates:
            raise ValueError("acquire needs at least one runtime")
        for i, gate in enumerate(gates):
            slot = gate.try_take()
            if slot is not None:
                return slot, i
        waiter = _Waiter()
        for gate in gates:
            gate.enqueue(waiter)
        self.waiting += 1
        try:
            if on_wait is not None:
                on_wait()
            await asyncio.wait([waiter.granted], timeout=max_wait_s)
            if not waiter.granted.done():
                waiter.granted.cancel()
                log.warning(
                    "no room on %s after %.0f s: a box starts over the cap",
                    ", ".join(g.name for g in gates),
                    max_wait_s or 0.0,
                )
                return gates[0].take(), 0
            slot = waiter.granted.result()
            return slot, gates.index(slot.gate)
        except BaseException:
            # Cancelled while waiting: a slot granted meanwhile goes back.
            if waiter.granted.done() and not waiter.granted.cancelled():
                waiter.granted.result().release()
            else:
                waiter.granted.cancel()
            raise
        finally:
            self.waiting -= 1
            for gate in gates:
                gate.forget(waiter)
                gate.serve()  # a waiter gone from the head may have held others back

    def counts(self) -> dict[str, dict[str, int]]:
        """Per runtime used so far: boxes starting, held, and the caps (for stats)."""
        return {
            name: {
                "starting": g.starting,
                "running": g.running,
                **({"cap_starting": g.cap.starting} if g.cap.starting else {}),
                **({"cap_running": g.cap.running} if g.cap.running else {}),
            }
            for name, g in self._gates.items()
        }


# Names of the SDKs' exceptions that mean "too many boxes" (E2B's RateLimitException
# and ServiceBusyException; Modal's ResourceExhaustedError), and the words their
# messages and HTTP errors use for it.
_CAPACITY_TYPES = frozenset(
    {"RateLimitException", "ServiceBusyException", "ResourceExhaustedError"}
)
_CAPACITY_WORDS = re.compile(r"\b429\b|too many|rate limit|concurrency limit|quota exceeded")


def is_capacity_error(e: BaseException) -> bool:
    """The box was refused as one too many, not broken: `BoxCapacity`, an SDK exception
    named for it, an HTTP 429, or a message that says so, anywhere in the chain of
    causes (a runtime may wrap the SDK's error). A spec's spillover runtime is tried
    next; without one the error is the provision's, as any failure to start."""
    seen: set[int] = set()
    cause: BaseException | None = e
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, BoxCapacity) or type(cause).__name__ in _CAPACITY_TYPES:
            return True
        if 429 in (getattr(cause, "status_code", None), getattr(cause, "status", None)):
            return True
        first = (str(cause).splitlines() or [""])[0].lower()
        if _CAPACITY_WORDS.search(first):
            return True
        cause = cause.__cause__ or cause.__context__
    return False
