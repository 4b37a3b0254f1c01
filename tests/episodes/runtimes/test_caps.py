"""The worker's caps on its boxes (episodes/runtimes/caps.py) and the spillover choice
(`episodes.session.launch.open_box`): waiters served in order, cancellation that takes
nothing with it, places freed when a box stops or fails to start, the next runtime
when the first is full or refuses the box as one too many. No clock: every wait here
is released by the test's own step."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from typing import Any

import pytest

from episodes.errors import BoxCapacity, HarnessFailure
from episodes.runtimes.caps import BoxCaps, is_capacity_error
from episodes.session import launch
from episodes.types.results import Task
from episodes.types.runtime import BoxCap, RuntimeConfig
from tests.support.helpers import spec


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_past_the_running_cap_waiters_are_served_in_the_order_they_came() -> None:
    caps = BoxCaps({"docker": BoxCap(running=1)})
    first, _ = await caps.acquire(["docker"])
    served: list[int] = []

    async def wait(n: int) -> None:
        slot, _ = await caps.acquire(["docker"])
        served.append(n)
        await hold[n].wait()
        slot.release()

    hold = {n: asyncio.Event() for n in range(3)}
    waiters = [asyncio.ensure_future(wait(n)) for n in range(3)]
    await _settle()
    assert served == [] and caps.waiting == 3
    first.started()
    await _settle()
    assert served == [], "a started box still holds its place"
    first.release()
    await _settle()
    assert served == [0]
    hold[0].set()
    await _settle()
    assert served == [0, 1]
    hold[1].set(), hold[2].set()
    await asyncio.gather(*waiters)
    assert served == [0, 1, 2] and caps.waiting == 0
    assert caps.counts()["docker"]["running"] == 0


async def test_the_starting_cap_frees_a_place_when_the_box_is_up() -> None:
    caps = BoxCaps({"modal": BoxCap(starting=1)})
    a, _ = await caps.acquire(["modal"])
    b = asyncio.ensure_future(caps.acquire(["modal"]))
    await _settle()
    assert not b.done()
    a.started()  # up: no longer starting, still held
    slot, _ = await b
    assert caps.counts()["modal"] == {"starting": 1, "running": 2, "cap_starting": 1}
    slot.release(), a.release()
    assert caps.counts()["modal"]["running"] == 0


async def test_a_cancelled_waiter_takes_nothing_and_holds_nobody_back() -> None:
    caps = BoxCaps({"docker": BoxCap(running=1)})
    first, _ = await caps.acquire(["docker"])
    gone = asyncio.ensure_future(caps.acquire(["docker"]))
    behind = asyncio.ensure_future(caps.acquire(["docker"]))
    await _settle()
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    first.release()
    slot, _ = await behind
    assert caps.counts()["docker"]["running"] == 1 and caps.waiting == 0
    slot.release()
    # Granted and cancelled in the same step: the place goes back.
    first, _ = await caps.acquire(["docker"])
    late = asyncio.ensure_future(caps.acquire(["docker"]))
    await _settle()
    first.release()  # grants `late`'s future...
    late.cancel()  # ...which is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await late
    assert caps.counts()["docker"]["running"] == 0


async def test_releasing_twice_frees_one_place() -> None:
    caps = BoxCaps({"docker": BoxCap(running=2)})
    a, _ = await caps.acquire(["docker"])
    b, _ = await caps.acquire(["docker"])
    a.release(), a.release()
    assert caps.counts()["docker"]["running"] == 1
    b.release()


async def test_the_first_runtime_with_room_is_chosen_and_a_waiter_takes_whichever_frees() -> None:
    caps = BoxCaps({"subprocess": BoxCap(running=1), "docker": BoxCap(running=1)})
    on_sub, i = await caps.acquire(["subprocess", "docker"])
    assert (on_sub.runtime, i) == ("subprocess", 0)
    on_docker, i = await caps.acquire(["subprocess", "docker"])
    assert (on_docker.runtime, i) == ("docker", 1)
    told: list[str] = []
    third = asyncio.ensure_future(
        caps.acquire(["subprocess", "docker"], on_wait=lambda: told.append("wait"))
    )
    await _settle()
    assert told == ["wait"] and not third.done()
    on_docker.release()
    slot, i = await third
    assert (slot.runtime, i) == ("docker", 1)
    # Served once: subprocess freeing later does not hand it a second place.
    on_sub.release()
    await _settle()
    assert caps.counts()["subprocess"]["running"] == 0
    slot.release()


async def test_past_its_longest_wait_a_box_starts_over_the_cap() -> None:
    caps = BoxCaps({"docker": BoxCap(running=1)})
    first, _ = await caps.acquire(["docker"])
    late, i = await caps.acquire(["docker"], max_wait_s=0)
    assert i == 0 and caps.counts()["docker"]["running"] == 2 and caps.waiting == 0
    first.release(), late.release()


def test_caps_go_over_the_defaults_field_by_field() -> None:
    assert BoxCaps().caps["modal"] == BoxCap(starting=128)
    caps = BoxCaps({"modal": BoxCap(running=512), "docker": BoxCap(running=8)})
    assert caps.caps["modal"] == BoxCap(starting=128, running=512)
    assert BoxCaps({"modal": BoxCap(starting=None)}).caps["modal"] == BoxCap()
    assert caps.gate("e2b").has_room()  # no cap: never waits


class _HttpError(Exception):
    def __init__(self, status_code: int) -> None:
        super().__init__(f"HTTP {status_code}")
        self.status_code = status_code


class RateLimitException(Exception):  # named as E2B's
    pass


def test_what_counts_as_too_many_boxes() -> None:
    assert is_capacity_error(BoxCapacity("no room"))
    assert is_capacity_error(_HttpError(429))
    assert is_capacity_error(RateLimitException("slow down"))
    assert is_capacity_error(RuntimeError("sandbox: Too Many Requests"))
    wrapped = RuntimeError("box failed to start")
    wrapped.__cause__ = _HttpError(429)
    assert is_capacity_error(wrapped)
    assert not is_capacity_error(_HttpError(500))
    assert not is_capacity_error(RuntimeError("image not found: port 4290"))
    assert not is_capacity_error(HarnessFailure("the harness exited 1"))


# -- the spillover choice, over fake boxes ----------------------------------------------


class _Box:
    def __init__(self, config: RuntimeConfig) -> None:
        self.config = config
        self.stopped = False

    async def stop(self) -> None:
        self.stopped = True


def _fake_boxes(monkeypatch: pytest.MonkeyPatch, refuse: set[str]) -> list[_Box]:
    """acquire_runtime over fake boxes; a runtime in `refuse` says "too many"."""
    made: list[_Box] = []

    async def acquire(box: AsyncExitStack, config: RuntimeConfig, *a: Any) -> tuple[Any, None]:
        b = _Box(config)
        made.append(b)
        box.push_async_callback(b.stop)
        if config.type in refuse:
            raise BoxCapacity(f"{config.type}: too many sandboxes")
        return b, None

    monkeypatch.setattr(launch, "acquire_runtime", acquire)
    return made


async def _same(config: RuntimeConfig) -> RuntimeConfig:
    return config


SPILL = spec(harness={"runtime": [{"type": "subprocess", "isolation": "none"}, "docker"]})


async def test_a_box_refused_as_one_too_many_spills_to_the_next_runtime(monkeypatch) -> None:
    made = _fake_boxes(monkeypatch, refuse={"subprocess"})
    caps = BoxCaps()
    async with AsyncExitStack() as stack:
        box, _, config = await launch.open_box(
            stack, SPILL, Task(id="t"), 0, {}, prepare=_same, caps=caps
        )
        assert config.type == "docker" and box is made[1]
        assert made[0].stopped, "the refused box's remains are stopped"
        assert caps.counts()["subprocess"]["running"] == 0
        assert caps.counts()["docker"] == {"starting": 0, "running": 1}
    assert made[1].stopped and caps.counts()["docker"]["running"] == 0


async def test_with_no_runtime_left_the_refusal_is_the_provisions(monkeypatch) -> None:
    _fake_boxes(monkeypatch, refuse={"subprocess", "docker"})
    caps = BoxCaps()
    with pytest.raises(BoxCapacity, match="docker"):
        async with AsyncExitStack() as stack:
            await launch.open_box(stack, SPILL, Task(id="t"), 0, {}, prepare=_same, caps=caps)
    assert all(c["running"] == 0 for c in caps.counts().values())


async def test_a_full_first_runtime_sends_the_box_to_the_next(monkeypatch) -> None:
    _fake_boxes(monkeypatch, refuse=set())
    caps = BoxCaps({"subprocess": BoxCap(running=1)})
    async with AsyncExitStack() as one, AsyncExitStack() as two:
        _, _, first = await launch.open_box(
            one, SPILL, Task(id="t"), 0, {}, prepare=_same, caps=caps
        )
        _, _, second = await launch.open_box(
            two, SPILL, Task(id="t"), 1, {}, prepare=_same, caps=caps
        )
        assert (first.type, second.type) == ("subprocess", "docker")


async def test_a_box_that_fails_otherwise_frees_its_place_and_does_not_spill(monkeypatch) -> None:
    tried: list[str] = []

    async def broken(box: AsyncExitStack, config: RuntimeConfig, *a: Any) -> Any:
        tried.append(config.type)
        raise RuntimeError("engine exploded")

    monkeypatch.setattr(launch, "acquire_runtime", broken)
    caps = BoxCaps({"subprocess": BoxCap(running=1)})
    with pytest.raises(RuntimeError, match="exploded"):
        async with AsyncExitStack() as stack:
            await launch.open_box(stack, SPILL, Task(id="t"), 0, {}, prepare=_same, caps=caps)
    assert tried == ["subprocess"]
    assert caps.counts()["subprocess"] == {"starting": 0, "running": 0, "cap_running": 1}
