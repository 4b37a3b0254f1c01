"""Small asyncio helpers shared by the runtimes and the harness session."""

from __future__ import annotations

import asyncio
from typing import TypeVar

T = TypeVar("T")


async def finish(task: asyncio.Future[T]) -> T:
    """Await `task` to its end even if our caller is cancelled meanwhile, then re-raise.

    Teardown (removing a container, killing a process group) must not be abandoned
    half-way because the activity or test that asked for it was cancelled.
    """
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    return task.result()
