"""Backpressure: a full worker stops polling for provisions.

A custom slot supplier for the shared queue's activity slots (only `provision`
uses them): a slot is handed out only while live sessions plus outstanding
permits stay under `max_sessions`. A full worker simply stops asking the server
for provisions, so they go to workers with room instead of failing and retrying.
So does a worker whose provision breaker is open (`episodes/breaker.py`: its boxes
keep failing to start), and one whose sessions mostly wait on a saturated model fleet
(`episodes/model/fleet.py`: a box started now would only wait in the same queue).
And so does a worker where a provision waits for room under its box caps
(`episodes/runtimes/caps.py`): that provision's runtimes are full, and so, most likely,
are the next one's, which would wait beside it holding a place another worker has.

Why "a provision waits" and not "a runtime's cap is full": a worker serves specs of
several runtimes, and a provision's runtime is not known until it is taken. A full
runtime alone says nothing of the next spec (another runtime, or one that lists a
spillover runtime with room, which does not wait at all); a provision that had to wait
says its specs are meeting full caps here. Provisions for other runtimes are then
served by other workers, or here again as soon as a box of the full runtime is given
back and the waiter gets it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from temporalio.worker import (
    CustomSlotSupplier,
    SlotMarkUsedContext,
    SlotPermit,
    SlotReleaseContext,
    SlotReserveContext,
)

from episodes.breaker import ProvisionBreaker
from episodes.model.fleet import saturated as fleet_saturated
from episodes.session.registry import SessionRegistry

_POLL_S = 0.05


class SessionSlots(CustomSlotSupplier):
    def __init__(
        self,
        registry: SessionRegistry,
        breaker: ProvisionBreaker | None = None,
        extra: Callable[[], int] | None = None,
        placed: Callable[[], int] | None = None,
        box_wait: Callable[[], bool] | None = None,
    ) -> None:
        """`extra`: places the registry does not hold beyond the permits they came
        with (a group's members, one permit per group, and those waiting for a place:
        `activities.group`); `placed`: the part of it live now; `box_wait`: whether a
        provision waits for room under the worker's box caps."""
        self.registry = registry
        self.breaker = breaker
        self.extra = extra
        self.placed = placed
        self.box_wait = box_wait
        self.permits = 0
        self.stopped = False

    def stop(self) -> None:
        """A draining worker: no more permits, ever."""
        self.stopped = True

    def _has_room(self) -> bool:
        if self.stopped or (self.breaker is not None and self.breaker.is_open()):
            return False
        if fleet_saturated():
            return False
        if self.box_wait is not None and self.box_wait():
            return False
        extra = self.extra() if self.extra is not None else 0
        return len(self.registry) + self.permits + extra < self.registry.max_sessions

    def has_room_for_member(self) -> bool:
        """A place for one more member of a group already running here: its sessions,
        permits and placed members under `max_sessions` (members waiting for a place
        are not counted against each other; a breaker or a saturated fleet does not
        hold back a group it already admitted)."""
        placed = self.placed() if self.placed is not None else 0
        return len(self.registry) + self.permits + placed < self.registry.max_sessions

    async def reserve_slot(self, ctx: SlotReserveContext) -> SlotPermit:
        # Polling is cheap here and keeps the supplier free of loop-bound conditions.
        while not self._has_room():
            await asyncio.sleep(_POLL_S)
        self.permits += 1
        return SlotPermit()

    def try_reserve_slot(self, ctx: SlotReserveContext) -> SlotPermit | None:
        if not self._has_room():
            return None
        self.permits += 1
        return SlotPermit()

    def mark_slot_used(self, ctx: SlotMarkUsedContext) -> None:
        pass

    def release_slot(self, ctx: SlotReleaseContext) -> None:
        self.permits -= 1
