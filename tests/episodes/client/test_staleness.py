"""`max_staleness` with `on_stale` (issue 41 §2): `keep` paces admission and discards
nothing; `requeue` (the old behaviour) starves the slow tasks.

The streams run on a virtual clock: each member's episode takes a number of ticks (a
short task 1, a long one 10: a quarter of the tasks), and the clock moves on only once
everything else in the event loop waits. No episode, no server, no wall time: the
verdicts are counts, the same on every machine. The trainer steps (policy version
+1) every `STEP_EVERY` groups it receives.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest

from episodes.client.batch.dispatch import Member, Outcome
from episodes.client.group import stream as groups_stream
from episodes.client.group.receipts import ReceiptsState
from episodes.client.group.staleness import Pacing, Running, yield_order
from episodes.types.results import EpisodeResult
from tests.support.helpers import spec

TASKS = 32
LONG_EVERY = 4  # a quarter of the tasks are long
SHORT, LONG = 1, 10  # ticks an episode takes
SAMPLES = 2
LIMIT = 16  # episodes in flight: 8 groups
K = 2
STEP_EVERY = 2


class Clock:
    """Virtual time: `sleep(d)` wakes when the clock reaches now + d; the clock moves to
    the next wake-up only when nothing else in the loop can run."""

    def __init__(self) -> None:
        self.now = 0
        self._sleepers: list[tuple[int, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    async def sleep(self, ticks: int) -> None:
        fut = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.now + ticks, next(self._seq), fut))
        await fut

    async def drive(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(0)
            if loop._ready:  # type: ignore[attr-defined]  # something can still run
                continue
            live = [s for s in self._sleepers if not s[2].done()]
            if not live:
                await asyncio.sleep(0.001)  # the test is done (or waits on real time)
                continue
            self._sleepers = live
            heapq.heapify(self._sleepers)
            self.now = self._sleepers[0][0]
            while self._sleepers and self._sleepers[0][0] <= self.now:
                _, _, fut = heapq.heappop(self._sleepers)
                if not fut.done():
                    fut.set_result(None)


@dataclass
class FakeClient:
    """What a groups stream needs of `EpisodesClient` (`BatchClient`)."""

    policy_version: int | None = 0
    task_queue: str = "q"
    client: Any = None
    upstreams: Any = None
    budget_exhausted: Any = None
    zero_variance_skipped: int = 0
    groups_dropped: int = 0
    episodes_ran: int = 0

    async def transcript(self, workflow_id: str) -> Any:
        raise AssertionError("not read")


class FakeReceipts:
    """The batch's receipts, in memory: `KEPT` is what an earlier run left."""

    KEPT = ReceiptsState("b")
    recorded: list[tuple[str, int]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    async def read(self) -> ReceiptsState:
        return self.KEPT

    async def ack(self, group_id: str) -> None:
        self.KEPT.acks.append(group_id)

    async def dispatched(self, group_id: str, version: int) -> None:
        self.recorded.append((group_id, version))


@dataclass
class Run:
    """What one simulated run did."""

    yielded: list[Any] = field(default_factory=list)  # Groups, in the order received
    started: Counter[str] = field(default_factory=Counter)  # episodes started per task
    cancelled: int = 0  # member episodes cancelled
    ticks: int = 0  # virtual time to the end (or to the trainer's last step)
    member_ticks: int = 0  # episode-ticks spent, cancelled ones included

    @property
    def long_yielded(self) -> int:
        return sum(_long(g.task_id) for g in self.yielded)


def _long(task_id: str) -> bool:
    return int(task_id[1:]) % LONG_EVERY == LONG_EVERY - 1


async def simulate(
    monkeypatch: pytest.MonkeyPatch,
    on_stale: str,
    *,
    max_groups: int | None = None,
    kept: ReceiptsState | None = None,
    version: int = 0,
) -> Run:
    clock, run, ec = Clock(), Run(), FakeClient(policy_version=version)
    monkeypatch.setattr(FakeReceipts, "KEPT", kept or ReceiptsState("b"))
    monkeypatch.setattr(FakeReceipts, "recorded", [])

    async def run_member(ec_: Any, spec_: Any, m: Member, **kw: Any) -> Outcome:
        run.started[m.task.id] += 1
        m.wid = f"{m.task.id}.s{m.sample}.a{m.attempt}"
        m.attempt += 1
        ticks = LONG if _long(m.task.id) else SHORT
        began = clock.now
        try:
            await clock.sleep(ticks)
        finally:
            run.member_ticks += clock.now - began
        result = EpisodeResult(
            workflow_id=m.wid,
            task_id=m.task.id,
            sample=m.sample,
            env="script",
            spec_name="s",
            termination="env_done",
            turns=1,
            reward=float(m.sample),
            duration_s=float(ticks),
        )
        return Outcome(result, infra=False)

    async def cancel(client: Any, wid: str | None) -> None:
        run.cancelled += wid is not None

    monkeypatch.setattr(groups_stream, "run_member", run_member)
    monkeypatch.setattr(groups_stream, "cancel_episode", cancel)
    monkeypatch.setattr(groups_stream, "Receipts", FakeReceipts)
    tasks = [{"id": f"t{i}", "data": {"messages": ["a"]}} for i in range(TASKS)]
    s = spec(
        tasks=tasks,
        samples=SAMPLES,
        model={"base_url": "http://127.0.0.1:1/v1", "model": "m"},
    )
    driver = asyncio.create_task(clock.drive())
    agen = groups_stream.stream_groups(
        ec,
        s,
        batch="b",
        limit=LIMIT,
        max_staleness=K,
        on_stale=on_stale,  # type: ignore[arg-type]
    )
    try:
        async for group in agen:
            run.yielded.append(group)
            if len(run.yielded) % STEP_EVERY == 0:
                ec.policy_version = (ec.policy_version or 0) + 1  # the trainer's step
            await group.ack()
            if max_groups is not None and len(run.yielded) >= max_groups:
                break
    finally:
        run.ticks = clock.now
        await agen.aclose()
        driver.cancel()
    return run


def _print(name: str, r: Run) -> None:
    lags = [g.staleness for g in r.yielded]
    print(
        f"{name}: {len(r.yielded)} groups ({r.long_yielded} long) in {r.ticks} ticks, "
        f"max lag {max(lags)}, re-dispatched {sum(g.stale for g in r.yielded)}, "
        f"episodes cancelled {r.cancelled}, episode-ticks {r.member_ticks}"
    )


async def test_keep_yields_every_slow_group_whole_within_k_plus_one(monkeypatch) -> None:
    r = await simulate(monkeypatch, "keep")
    _print("keep", r)
    assert len(r.yielded) == TASKS and r.long_yielded == TASKS // LONG_EVERY
    assert r.cancelled == 0 and all(g.stale == 0 for g in r.yielded)
    assert all(n == SAMPLES for n in r.started.values())  # nothing ran twice
    assert max(g.staleness for g in r.yielded) <= K + 1
    assert all(g.staleness == g_now - g.policy_version for g, g_now in _versions(r))


def _versions(r: Run) -> list[tuple[Any, int]]:
    """Each yielded group beside the trainer's version when it was yielded."""
    return [(g, i // STEP_EVERY) for i, g in enumerate(r.yielded)]


async def test_requeue_starves_the_slow_groups(monkeypatch) -> None:
    budget = TASKS * 3 // 4  # the trainer stops after this many groups
    keep = await simulate(monkeypatch, "keep", max_groups=budget)
    requeue = await simulate(monkeypatch, "requeue", max_groups=budget)
    _print("keep (budget)", keep)
    _print("requeue (budget)", requeue)
    assert requeue.cancelled > 0 and any(n > SAMPLES for n in requeue.started.values())
    assert requeue.long_yielded < keep.long_yielded
    whole = await simulate(monkeypatch, "requeue")
    _print("requeue", whole)
    assert whole.cancelled > 0 and len(whole.yielded) == TASKS


def test_pacing_rules() -> None:
    keep, requeue, off = Pacing(2, "keep"), Pacing(2, "requeue"), Pacing(None)
    old, fresh = Running(1), Running(4)
    assert keep.admits(3, [old, fresh]) and not keep.admits(4, [old, fresh])
    assert requeue.admits(9, [old]) and off.admits(9, [old])  # only `keep` paces
    assert keep.holds(4, [old]) and not keep.holds(3, [old])
    assert not keep.holds(9, [Running(1, restored=True)])  # an earlier run's: not held
    assert not keep.admits(9, [Running(1, restored=True)])  # ... but it paces admission
    assert keep.stale(4, 1) and not keep.stale(None, 1) and not keep.stale(4, None)
    assert sorted([(3, 0), (1, 5), (None, 2)], key=lambda x: yield_order(*x)) == [
        (None, 2),
        (1, 5),
        (3, 0),
    ]


async def test_a_restarted_stream_skips_what_was_acknowledged_and_keeps_versions(
    monkeypatch,
) -> None:
    """An earlier trainer acknowledged t0..t3 and dispatched t4..t7 at versions 3..6;
    the new one resumes at version 9 (max_staleness 2). It gets the 28 others, once
    each; t4..t7 keep their versions (not recorded again) and go out first, oldest
    first, whatever their lag; every other group is recorded at its own version."""
    acked = [f"b/t{i}" for i in range(4)]
    kept = ReceiptsState("b", exists=True, groups=TASKS, acks=list(acked))
    kept.versions = {f"b/t{i}": i - 1 for i in range(4, 8)}
    r = await simulate(monkeypatch, "keep", kept=kept, version=9)
    got = [g.task_id for g in r.yielded]
    assert len(got) == TASKS - 4 and not {f"t{i}" for i in range(4)} & set(got)
    assert got[:4] == ["t4", "t5", "t6", "t7"]
    assert [(g.policy_version, g.staleness) for g in r.yielded[:4]] == [
        (3, 6),
        (4, 5),
        (5, 5),  # the trainer stepped to 10 after two groups
        (6, 4),
    ]
    recorded = dict(FakeReceipts.recorded)
    assert not {f"b/t{i}" for i in range(8)} & set(recorded) and len(recorded) == TASKS - 8
    assert FakeReceipts.KEPT.acks == acked + [g.group_id for g in r.yielded]
    assert r.cancelled == 0 and all(n == SAMPLES for n in r.started.values())
    # requeue: t7 (long) is stale at version 9 and still running: it is cancelled and
    # run again at the current version.
    kept = ReceiptsState("b", exists=True, groups=TASKS, acks=list(acked))
    kept.versions = {f"b/t{i}": i - 1 for i in range(4, 8)}
    r = await simulate(monkeypatch, "requeue", kept=kept, version=9)
    [t7] = [g for g in r.yielded if g.task_id == "t7"]
    assert t7.stale >= 1 and t7.policy_version >= 9 and r.cancelled >= SAMPLES
