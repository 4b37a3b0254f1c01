"""Self-checks that stop or break their box (`selfcheck.FRESH_CHECKS`): each gets a fresh
started box of its own. The shared-box checks and the runner are in `runner`, which
imports these back (`selfcheck.stop_twice` keeps working).
"""

from __future__ import annotations

import asyncio
import contextlib

from episodes.runtimes.base import Runtime
from episodes.runtimes.selfcheck.kit import (
    SLEEPER,
    Check,
    Skipped,
    Subject,
    equal,
    raises,
    read_line,
    run,
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


async def a_box_killed_from_outside_is_lost_a_process_exit_is_not(s: Subject) -> None:
    """`box_lost()` (docs/failures.md): None after a process exited by itself in a box
    that is there (the harness's own crash); one line once the box was killed from
    outside under a running process (a box failover); None again once we stopped it."""
    if s.kill_box is None:
        raise Skipped("a box cannot be killed from outside")
    if type(s.box).box_lost is Runtime.box_lost:
        raise Skipped("this runtime tells no lost box (Runtime.box_lost)")
    rc, _, _ = await run(s, "import sys; sys.exit(3)")
    equal(rc, 3, "exit code of a process that exits by itself")
    equal(await within(s.box.box_lost()), None, "box_lost() after a process exited by itself")
    proc = await within(s.box.open_process([*s.python, "-c", SLEEPER]))
    equal(await read_line(proc.stdout), b"ready\n", "first line")
    await asyncio.to_thread(s.kill_box, s.box)
    # As the harness driver sees it: the process's stream ends, then the box is asked.
    equal(await within(proc.stdout.read()), b"", "stdout of a process whose box was killed")
    await within(proc.wait())
    lost = await within(s.box.box_lost())
    if not lost or "\n" in lost:
        raise AssertionError(f"box_lost() of a box killed from outside: got {lost!r}, want a line")
    await within(s.box.stop())
    equal(await within(s.box.box_lost()), None, "box_lost() once we stopped the box")


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
    a_box_killed_from_outside_is_lost_a_process_exit_is_not,
    stop_is_finished_even_if_the_caller_is_cancelled,
]
