"""RuntimePool over real subprocess boxes (real workdirs, real processes, real stop()).

TTL is driven by an injected clock, never by sleeping.
"""

from __future__ import annotations

import asyncio
import os
import sys

import pytest

from episodes.errors import PoolClosed, RuntimeUnavailable, SpecError
from episodes.runtimes.pool.runtime_pool import RuntimePool, RuntimePoolConfig, render_reuse_key
from episodes.runtimes.subprocess import SubprocessRuntime
from episodes.types.results import Task
from episodes.types.runtime import DockerConfig, SubprocessConfig

CFG = SubprocessConfig()
BOUND_S = 10.0


class Clock:
    """A monotonic clock the test moves by hand; counts reads so a test can see sweeps."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.now


class Box(SubprocessRuntime):
    """A real subprocess box whose health and start-up the test can break."""

    sick = False
    fail_start = False

    async def alive(self) -> bool:
        return not self.sick and await super().alive()

    async def start(self) -> None:
        await super().start()  # the workdir exists, so a failed start leaves something to stop
        if self.fail_start:
            raise RuntimeUnavailable("box refused to start")


class Factory:
    """Builds a local box for any config, so config drift is testable without an engine."""

    def __init__(self) -> None:
        self.made: list[Box] = []
        self.labels: list[dict[str, str] | None] = []
        self.fail_next_start = False

    def __call__(self, config, *, labels=None) -> Box:
        box = Box(SubprocessConfig())
        box.fail_start, self.fail_next_start = self.fail_next_start, False
        self.made.append(box)
        self.labels.append(labels)
        return box


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def factory():
    made = Factory()
    yield made
    # Whatever a test did, no box of it may outlive it.
    await asyncio.gather(*(box.stop() for box in made.made))


def make_pool(factory: Factory, clock: Clock, **config) -> RuntimePool:
    return RuntimePool(RuntimePoolConfig(**config), factory=factory, clock=clock)


async def run_py(box: SubprocessRuntime, code: str) -> str:
    proc = await box.open_process([sys.executable, "-c", code], env={"PATH": os.environ["PATH"]})
    out = b""
    while chunk := await proc.stdout.read(65536):
        out += chunk
    assert await proc.wait() == 0
    return out.decode()


async def until(predicate, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + BOUND_S
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, f"not within {BOUND_S} s: {what}"
        await asyncio.sleep(0.01)


async def spin(n: int = 20) -> None:
    """Give every ready task many chances to run."""
    for _ in range(n):
        await asyncio.sleep(0)


async def test_same_key_reuses_the_box_and_its_workdir(factory, clock):
    pool = make_pool(factory, clock)
    lease = pool.lease("k", CFG, labels={"session": "s1"})
    async with lease as box:
        assert not lease.hit
        cwd = await run_py(
            box, "import os; open('state.txt','w').write('kept'); print(os.getcwd())"
        )
    workdir = cwd.strip()
    lease2 = pool.lease("k", CFG)
    async with lease2 as again:
        assert lease2.hit
        assert again is box and again.id == box.id
        assert await run_py(again, "print(open('state.txt').read())") == "kept\n"
    assert len(factory.made) == 1 and factory.labels == [{"session": "s1"}]
    assert not box.stopped and os.path.isdir(workdir)
    await pool.discard("k")
    assert box.stopped and not os.path.exists(workdir)


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def test_what_an_episode_left_running_is_swept_before_the_box_is_parked(factory, clock):
    # The harness exits and leaves a child in its group; nobody kills it (issue 11).
    pool = make_pool(factory, clock)
    leave = (
        "import subprocess, sys; d = subprocess.DEVNULL\n"
        "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'],"
        " stdin=d, stdout=d, stderr=d)\n"
        "print(c.pid)"
    )
    async with pool.lease("k", CFG) as box:
        child = int(await run_py(box, leave))
        assert _running(child)
    await until(lambda: not _running(child), "the leftover child is gone once parked")
    lease = pool.lease("k", CFG)
    async with lease as again:
        assert lease.hit and again is box


async def test_a_box_that_cannot_be_swept_is_stopped_not_parked(factory, clock):
    pool = make_pool(factory, clock)
    async with pool.lease("k", CFG) as box:
        box.sweep = _unsweepable  # type: ignore[method-assign]
    assert box.stopped
    lease = pool.lease("k", CFG)
    async with lease:
        assert not lease.hit
    assert pool.stats.stopped == 1


async def _unsweepable() -> bool:
    return False


async def test_drifted_config_gets_a_fresh_box_and_stops_the_old(factory, clock):
    pool = make_pool(factory, clock)
    async with pool.lease("k", DockerConfig(image="a")) as old:
        pass
    lease = pool.lease("k", DockerConfig(image="b"))
    async with lease as new:
        assert not lease.hit and new.id != old.id
        assert old.stopped and not new.stopped
    lease = pool.lease("k", DockerConfig(image="b"))
    async with lease as same:
        assert lease.hit and same is new
    await pool.close()


async def test_idle_past_ttl_is_replaced(factory, clock):
    pool = make_pool(factory, clock, ttl_s=60)
    async with pool.lease("k", CFG) as first:
        pass
    clock.now += 59.9
    async with pool.lease("k", CFG) as second:
        assert second is first
    clock.now += 60.0
    lease = pool.lease("k", CFG)
    async with lease as third:
        assert not lease.hit and third is not first
        assert first.stopped
    await pool.close()


async def test_box_that_is_not_alive_is_replaced(factory, clock):
    pool = make_pool(factory, clock)
    async with pool.lease("k", CFG) as first:
        pass
    first.sick = True
    lease = pool.lease("k", CFG)
    async with lease as second:
        assert not lease.hit and second is not first
    assert first.stopped and not second.stopped
    await pool.close()


async def test_sweeper_stops_an_expired_idle_box(factory, clock):
    # ttl 0.2 s -> the sweeper wakes every 0.05 s of real time; expiry follows the fake clock.
    async with make_pool(factory, clock, ttl_s=0.2) as pool:
        async with pool.lease("k", CFG) as box:
            pass
        reads = clock.reads
        await until(lambda: clock.reads >= reads + 3, "three sweeps")
        assert not box.stopped and pool.stats.idle == 1  # not expired on the fake clock
        clock.now += 0.2
        await until(lambda: box.stopped, "the sweeper stops the expired box")
        assert pool.stats.idle == 0
    assert pool.closed


async def test_exception_through_the_lease_stops_the_box(factory, clock):
    pool = make_pool(factory, clock)
    with pytest.raises(ValueError, match="boom"):
        async with pool.lease("k", CFG) as box:
            raise ValueError("boom")
    assert box.stopped and pool.stats.idle == 0
    async with pool.lease("k", CFG) as fresh:
        assert fresh is not box
    await pool.close()


async def test_cancellation_inside_the_lease_stops_the_box(factory, clock):
    pool = make_pool(factory, clock)
    inside = asyncio.Event()

    async def episode() -> None:
        async with pool.lease("k", CFG):
            inside.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(episode())
    await inside.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    (box,) = factory.made
    assert box.stopped and pool.stats.idle == 0 and pool.stats.leased == 0
    await pool.close()


async def test_box_stopped_by_the_caller_is_not_kept(factory, clock):
    pool = make_pool(factory, clock)
    async with pool.lease("k", CFG) as box:
        await box.stop()
    assert pool.stats.idle == 0
    lease = pool.lease("k", CFG)
    async with lease as fresh:
        assert not lease.hit and fresh is not box
    await pool.close()


async def test_failed_start_stops_the_box_and_frees_the_key(factory, clock):
    pool = make_pool(factory, clock)
    factory.fail_next_start = True
    with pytest.raises(RuntimeUnavailable):
        async with pool.lease("k", CFG):
            pass
    (broken,) = factory.made
    assert broken.stopped
    async with pool.lease("k", CFG) as box:  # would hang if the key lock leaked
        assert box is not broken
    await pool.close()


async def test_discard_stops_is_idempotent_and_waits_for_the_live_lease(factory, clock):
    pool = make_pool(factory, clock)
    await pool.discard("never-leased")
    async with pool.lease("k", CFG) as box:
        pass
    await pool.discard("k")
    assert box.stopped
    await pool.discard("k")

    release = asyncio.Event()
    inside = asyncio.Event()

    async def episode() -> None:
        async with pool.lease("k", CFG):
            inside.set()
            await release.wait()

    holder = asyncio.create_task(episode())
    await inside.wait()
    (_, live) = factory.made
    discarding = asyncio.create_task(pool.discard("k"))
    await spin()
    assert not discarding.done() and not live.stopped
    release.set()
    await asyncio.wait_for(asyncio.gather(holder, discarding), BOUND_S)
    assert live.stopped and pool.stats.idle == 0
    await pool.close()


async def test_close_stops_idle_boxes_then_releases_stop_and_leases_raise(factory, clock):
    pool = make_pool(factory, clock)
    async with pool.lease("a", CFG) as idle_box:
        pass
    held = pool.lease("b", CFG)
    held_box = await held.__aenter__()
    extra = pool.lease("b", CFG)  # the key is busy: a box of its own
    extra_box = await asyncio.wait_for(extra.__aenter__(), BOUND_S)

    await pool.close()
    assert idle_box.stopped and not held_box.stopped and not extra_box.stopped
    await extra.__aexit__(None, None, None)
    await held.__aexit__(None, None, None)
    assert held_box.stopped and extra_box.stopped
    with pytest.raises(PoolClosed, match="closed"):
        async with pool.lease("c", CFG):
            pass
    assert pool.stats.idle == 0 and pool.stats.leased == 0
    await pool.close()  # twice is harmless


async def test_max_idle_stops_the_oldest_idle_box(factory, clock):
    pool = make_pool(factory, clock, max_idle=1)
    async with pool.lease("a", CFG) as a:
        pass
    clock.now += 1
    async with pool.lease("b", CFG) as b:
        pass
    assert a.stopped and not b.stopped
    assert pool.stats.idle == 1
    lease = pool.lease("b", CFG)
    async with lease:
        assert lease.hit
    await pool.close()
    assert b.stopped


async def test_a_busy_key_is_a_miss_not_a_wait(factory, clock):
    """Samples of one task share a key: the second lease must not wait (inside the
    provision activity, holding its slot) for the first episode to end."""
    pool = make_pool(factory, clock)
    first = pool.lease("k", CFG)
    box = await first.__aenter__()
    second = pool.lease("k", CFG)
    other = await asyncio.wait_for(second.__aenter__(), BOUND_S)
    assert other is not box and not second.hit  # a fresh box: one box never hosts two
    assert pool.stats.model_dump() == dict(hits=0, misses=2, idle=0, leased=2, stopped=0)
    await second.__aexit__(None, None, None)  # the key is still leased: parked? no, stopped
    assert other.stopped and not box.stopped
    await first.__aexit__(None, None, None)
    lease = pool.lease("k", CFG)
    async with lease as again:
        assert lease.hit and again is box
    assert len(factory.made) == 2
    await pool.close()


async def test_a_busy_key_miss_is_parked_if_the_key_is_free_when_it_ends(factory, clock):
    pool = make_pool(factory, clock)
    first = pool.lease("k", CFG)
    await first.__aenter__()
    second = pool.lease("k", CFG)
    other = await asyncio.wait_for(second.__aenter__(), BOUND_S)
    await first.__aexit__(RuntimeError, RuntimeError("failed"), None)  # stopped, not parked
    await second.__aexit__(None, None, None)  # the key is free: this box is kept
    assert not other.stopped and pool.stats.idle == 1
    lease = pool.lease("k", CFG)
    async with lease as again:
        assert lease.hit and again is other
    await pool.close()
    assert other.stopped


async def test_a_lease_cancelled_while_starting_does_not_block_the_key(factory, clock):
    pool = make_pool(factory, clock)
    held = pool.lease("k", CFG)
    box = await held.__aenter__()
    extra = asyncio.create_task(pool.lease("k", CFG).__aenter__())
    extra.cancel()
    with pytest.raises(asyncio.CancelledError):
        await extra
    await held.__aexit__(None, None, None)
    lease = pool.lease("k", CFG)
    async with asyncio.timeout(BOUND_S), lease as again:
        assert lease.hit and again is box
    assert pool.stats.leased == 0
    await pool.close()


async def test_a_lease_can_span_tasks(factory, clock):
    pool = make_pool(factory, clock)
    lease = pool.lease("k", CFG)
    box = await asyncio.create_task(lease.__aenter__())  # e.g. the provision activity
    await asyncio.create_task(lease.__aexit__(None, None, None))  # e.g. the release activity
    assert pool.stats.idle == 1 and not box.stopped
    await pool.close()
    assert box.stopped


async def test_stats_count_hits_misses_and_stops(factory, clock):
    pool = make_pool(factory, clock)
    assert pool.stats.model_dump() == dict(hits=0, misses=0, idle=0, leased=0, stopped=0)
    async with pool.lease("k", CFG):
        assert pool.stats.leased == 1
    async with pool.lease("k", CFG):
        pass
    with pytest.raises(RuntimeError):
        async with pool.lease("k", CFG):
            raise RuntimeError("episode failed")
    async with pool.lease("j", CFG):
        pass
    assert pool.stats.model_dump() == dict(hits=2, misses=2, idle=1, leased=0, stopped=1)
    await pool.close()
    assert pool.stats.model_dump() == dict(hits=2, misses=2, idle=0, leased=0, stopped=2)


async def test_pool_config_rejects_nonsense():
    with pytest.raises(ValueError):
        RuntimePoolConfig(ttl_s=0)
    with pytest.raises(ValueError):
        RuntimePoolConfig(max_idle=-1)


TASK = Task(id="t-1", data={"repo": "acme/app", "n": 3})


@pytest.mark.parametrize(
    ("template", "key"),
    [
        ("{task.id}", "t-1"),
        ("{task.data[repo]}:{sample}", "acme/app:2"),
        ("seat-{task.data[n]:03d}", "seat-003"),
        ("fixed", "fixed"),
    ],
)
def test_render_reuse_key(template, key):
    assert render_reuse_key(template, TASK, 2) == key


@pytest.mark.parametrize(
    ("template", "names"),
    [
        ("{task.data[branch]}", ["{task.data[branch]}", "'branch'"]),
        ("{task.title}", ["{task.title}"]),
        ("{seat}", ["'seat'"]),
        ("{}", ["positional"]),
        ("{task.id", ["invalid template"]),
        ("{task.__class__}", ["private"]),
        ("  ", ["empty"]),
    ],
)
def test_render_reuse_key_errors_name_the_template_and_field(template, names):
    with pytest.raises(SpecError) as info:
        render_reuse_key(template, TASK, 0)
    message = str(info.value)
    assert repr(template) in message
    for name in names:
        assert name in message
