"""What a live session needs from the program it drives, whatever protocol it speaks.

`HarnessSession` (the native framed protocol) implements it; so does the ACP driver.
A driver never raises out of `turn()` for a misbehaving harness: crashes, timeouts and
protocol violations come back as a TurnRecord with `error_type`, after the driver has
stopped the process itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from episodes.models import TurnRecord

EventCallback = Callable[[Any], Awaitable[None] | None]


class HarnessDriver(Protocol):
    @property
    def alive(self) -> bool: ...

    @property
    def pid(self) -> int | None: ...

    @property
    def stderr_tail(self) -> str: ...

    async def start(self) -> None:
        """Open the process and wait until it is ready. Raises HarnessStartFailed."""

    async def turn(
        self, n: int, message: Any, *, timeout_s: float, on_event: EventCallback | None = None
    ) -> TurnRecord:
        """Run turn `n` with `message`; failures are in the record, not raised."""

    async def stop(self) -> None:
        """Stop the program and everything it started. Idempotent."""
