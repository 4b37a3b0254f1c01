"""Self-checks that stop or break their box (`selfcheck.FRESH_CHECKS`): each gets a fresh
started box of its own. The shared-box checks and the runner are in `runner`, which
imports these back (`selfcheck.stop_twice` keeps working).
"""

from __future__ import annotations

import asyncio
import contextlib

from episodes.runtimes.selfcheck.kit import (
    SLEEPER,
    Check,
    Skipped,
    Subject,
    equal,
    raises,
    read_line,
    within,
)


async def stop_twice(s: Subject) -> None:
    if not await s.box.alive():
        raise AssertionError("a started box is not alive()")
    await within(s.box.stop())
    await within(s.box.stop())
    equal((s.box.stopped, await s.box.alive()), (True, False), "(stopped, alive()) after stop")
    await raises(s.box.open_process(["true"]), RuntimeError, what="open_process() after stop()")


async def stop_ends_running_processes(s: Subject) -> None:
    proc = await within(s.box.open_process([*s.python, "-c", SLEEPER]))
    equal(await read_line(proc.stdout), b"ready\n", "first line")
    await within(s.box.stop())
    equal(await within(proc.wait()), -9, "wait() of a process whose box was stopped")
    equal(await within(proc.stdout.read()), b"", "stdout after stop()")


async def alive_is_false_after_the_box_died(s: Subject) -> None:
    if s.kill_box is None:
        raise Skipped("a box cannot be killed from outside")
    if not await s.box.alive():
        raise AssertionError("a started box is not alive()")
    await asyncio.to_thread(s.kill_box, s.box)
    for _ in range(100):  # the kill lands asynchronously on some engines
        if not await s.box.alive():
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError("alive() is still True 10 s after the box was killed")
    await within(s.box.stop())  # stopping a dead box is fine


async def stop_is_finished_even_if_the_caller_is_cancelled(s: Subject) -> None:
    proc = await within(s.box.open_process([*s.python, "-c", SLEEPER]))
    equal(await read_line(proc.stdout), b"ready\n", "first line")
    task = asyncio.ensure_future(s.box.stop())
    await asyncio.sleep(0)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    # No second stop() yet: the cancelled one alone must have ended the process.
    equal(await within(proc.wait()), -9, "wait() after a cancelled stop()")
    if await s.box.alive():
        raise AssertionError("the box is alive() after a cancelled stop()")
    await within(s.box.stop())


FRESH_CHECKS: list[Check] = [
    stop_twice,
    stop_ends_running_processes,
    alive_is_false_after_the_box_died,
    stop_is_finished_even_if_the_caller_is_cancelled,
]
