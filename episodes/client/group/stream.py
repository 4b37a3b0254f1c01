"""Groups: the samples of one task in a batch, streamed whole (`run_batch(groups=True)`).

    async for group in client.run_batch(spec, groups=True, policy_version=v, max_staleness=1):
        if group.failed:                       # an infrastructure failure past its retries
            continue                           # mask the whole group: no baseline from part
        advantages = group.advantages()        # reward minus the group's mean (GRPO)
        samples = await group.samples()        # token ids, masks, logprobs per episode
        client.policy_version = v = v + 1      # after the update: stale groups run again

A group (`contract.group_id`: batch/task, as `episodes export` names it) is yielded once
every member ended. A member that ends for an infrastructure reason (a lost worker, a
model upstream that gave up, a provision that got no box: `is_infra_failure`) runs
again as a fresh episode `<id>.r<n>`, up to the spec's `group_retries` times; past that
the group is yielded with `failed` set to why. Never a fabricated reward, never a
silently smaller group.

Policy versions: every member of a group is dispatched at the version the group was
first dispatched at (`model.policy_version`, recorded on each model call). With
`max_staleness=K` (`episodes.client.group.staleness`), `on_stale="keep"` (the
default) cancels nothing for its age: no new group starts, and no complete group is
handed out, while a group still running is more than K versions behind the client's
`policy_version`. `on_stale="requeue"`: such a group is cancelled (its episodes
cancelled, so they release their boxes) and dispatched again at the current version,
as fresh attempts; `Group.stale` counts those re-dispatches. Complete groups are
yielded oldest version first, each with its lag (`Group.staleness`).

Consumption: `await group.ack()` records on the server that the trainer used the
group (`episodes.client.group.receipts`). A trainer that runs the batch again under the
same id (after a crash, on another machine) gets every group it did not acknowledge
once, never one it did; the episodes re-attach where they are (none runs twice), and
a group keeps the version it was dispatched at (its receipts have it).

Budgets (`spec.budget`, `run_batch(budget=)`): counted from the members' results as
they end, every attempt of each (`episodes.client.batch.spending`); past one no new group is dispatched, the groups
already dispatched finish whole, and `client.budget_exhausted` names it. A re-run
re-attaches to the members that ended, counts them again and stops where it stopped.

Stragglers: with the spec's `group_timeout_s`, a group not complete that long after it
was dispatched has its running members cancelled (their episodes end `cancelled`) and
is yielded `partial` with the members that ended, or dropped (`group_on_timeout:
drop`; `EpisodesClient.groups_dropped` counts them). Either way the short episodes
win: the docs say so.

Oversampling: with the spec's `oversample: k` (or `run_batch(oversample=k)`) each group
runs `samples + k` members (samples `0 .. samples+k-1`) and is yielded once `samples`
of them ended; the members still running or not started are cut: a `cut` signal marks
their result (`EpisodeResult.cut`, so `episodes export` leaves them out) and they are
cancelled (`Group.cut` names them). Cut at `group_timeout_s` too (`cut:
group_timeout`). Running the batch again re-attaches to its members as they ended:
a cut one stays cut (not run again), so the group comes out as it did.

Zero variance: a group whose members all scored the same carries no GRPO signal
(`Group.zero_variance`); with `skip_zero_variance` it is not yielded, and
`EpisodesClient.zero_variance_skipped` counts it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, PrivateAttr

from episodes import contract
from episodes.client.batch.dispatch import (
    BatchClient,
    Member,
    Outcome,
    cancel_episode,
    cut_episode,
    dispatch_spec,
    run_member,
)
from episodes.client.batch.spending import Spending
from episodes.client.group.receipts import Receipts
from episodes.client.group.staleness import (
    OnStale,
    Pacing,
    Running,
    lag,
    oldest_serving_version,
    yield_order,
)
from episodes.errors import EpisodesError
from episodes.training.estimators import Estimator, diverged, episode_advantages
from episodes.training.samples import EpisodeSamples, no_model_calls, samples_of
from episodes.types.results import Cut, EpisodeResult, Transcript
from episodes.types.spec import EpisodeSpec

# How often a waiting stream looks at `client.policy_version` when no episode ends (a
# trainer may move it from another task while the stream waits).
VERSION_POLL_S = 1.0

Fetch = Callable[[str], Awaitable[Transcript]]
Ack = Callable[[str], Awaitable[None]]


class Group(BaseModel):
    """The samples of one task in a batch, every member ended."""

    model_config = ConfigDict(extra="forbid")

    group_id: str
    """`<batch>/<task id>`, as `episodes export` names it."""
    batch: str
    task_id: str
    policy_version: int | None = None
    """The version every member was dispatched at (None: the spec's, unversioned)."""
    results: list[EpisodeResult]
    """The members that ended, in sample order: the last attempt of each. One per
    sample; with `oversample`, the first `samples` to end (more when several ended at
    once)."""
    failed: str | None = None
    """Why the group cannot be trained on (a member's infrastructure failure after its
    retries), or None. A trainer masks a failed group whole."""
    retried: int = 0
    """Fresh episodes run for its members after infrastructure failures."""
    stale: int = 0
    """Times the group was cancelled as stale and dispatched again at a newer version."""
    staleness: int | None = None
    """Its lag: the client's `policy_version` when it was yielded, minus the oldest
    version that served any of its members (`episodes.client.group.staleness`). None
    when unversioned."""
    partial: bool = False
    """Cut at the spec's `group_timeout_s`: `results` holds only the members that ended
    by then (the others were cancelled). Biased towards short episodes."""
    cut: list[str] = []
    """The members' episodes cut (cancelled, `EpisodeResult.cut` set): stragglers past
    the `samples` that ended first (`oversample`), or past `group_timeout_s`. In no
    group's results and never exported."""

    _fetch: Fetch | None = PrivateAttr(default=None)
    _ack: Ack | None = PrivateAttr(default=None)
    _samples: list[EpisodeSamples] | None = PrivateAttr(default=None)
    _model: bool = PrivateAttr(default=True)  # the spec has a `model` (its calls: samples)

    async def ack(self) -> None:
        """Record on the server that the trainer consumed this group: running the batch
        again (a trainer that restarted) never hands it out again. Durable once it
        returns; acknowledging twice is harmless."""
        if self._ack is None:
            raise EpisodesError(f"group {self.group_id}: not from a batch stream, no receipts")
        await self._ack(self.group_id)

    @property
    def zero_variance(self) -> bool:
        """Every member has a reward and all are equal: every advantage is 0, the group
        carries no GRPO signal (a trainer may skip it). False for a failed group."""
        rewards = [r.reward for r in self.results]
        if self.failed is not None or not rewards or any(x is None for x in rewards):
            return False
        return len(set(rewards)) == 1

    def advantages(
        self,
        normalize_std: bool = False,
        *,
        estimator: Estimator = "grpo",
        include_diverged: bool = True,
    ) -> list[float | None]:
        """Per result, its advantage as `episodes export` computes it
        (`episodes.training.estimators`: `grpo`, reward minus the group's mean, divided
        by its std + 1e-4 with `normalize_std`; or `rloo`). All None when the group
        failed or any member has no reward (with `include_diverged=False`, also when a
        member's replay diverged): a baseline over part of a group is biased."""
        if self.failed is not None:
            return [None] * len(self.results)
        by_id = episode_advantages(
            self.results,
            estimator=estimator,
            normalize_std=normalize_std,
            include_diverged=include_diverged,
        )
        return [by_id[r.workflow_id] for r in self.results]

    @property
    def diverged(self) -> list[str]:
        """The members whose replay (a restart, resume or fork) diverged from their record
        (`EpisodeResult.replay_divergences`): `samples(include_diverged=False)` leaves
        their samples out."""
        return [r.workflow_id for r in self.results if diverged(r)]

    async def samples(self, include_diverged: bool = True) -> list[EpisodeSamples]:
        """Per result, its training samples (`episodes.training.samples`), from the
        transcripts read back from history on first use. EpisodesError when the spec
        has no `model`: no member made a model call, there is nothing to train on.
        `include_diverged=False`: a member in `diverged` has no samples (an empty
        `EpisodeSamples`, so the list stays one per result)."""
        built = await self._all_samples()
        if include_diverged:
            return built
        return [
            EpisodeSamples() if diverged(r) else s for r, s in zip(self.results, built, strict=True)
        ]

    async def _all_samples(self) -> list[EpisodeSamples]:
        if self._samples is None:
            if self._fetch is None:
                raise EpisodesError(f"group {self.group_id}: not from a client, no history")
            if not self._model:  # never a silent empty list: a trainer would step on nothing
                raise EpisodesError(no_model_calls(f"group {self.group_id}"))
            fetch = self._fetch
            transcripts = await asyncio.gather(*(fetch(r.workflow_id) for r in self.results))
            self._samples = [samples_of(t) for t in transcripts]
        return self._samples


def reading(group: Group, fetch: Fetch, *, model: bool, ack: Ack | None = None) -> Group:
    """`group`, its transcripts read with `fetch` (a workflow id -> its transcript) on
    `samples()`'s first use; `model`: its spec has a `model` (the calls `samples()`
    gives); `ack`: records its acknowledgement (a batch stream's receipts). Every stream
    and fork that makes a `Group` hands it out through this."""
    group._fetch, group._model, group._ack = fetch, model, ack
    return group


@dataclass
class _State:
    """A group while it runs."""

    index: int
    task_id: str
    members: list[Member]
    need: int  # members that make it whole: the spec's samples (the rest are spares)
    version: int | None = None
    dispatched: bool = False
    outcomes: dict[int, Outcome] = field(default_factory=dict)
    stale: int = 0
    began: float = 0.0  # when it was dispatched (monotonic)
    cut: list[str] = field(default_factory=list)
    settled: int = 0  # members an earlier run of the batch cut: ended, in no group
    restored: int | None = None  # the version an earlier run dispatched it at (receipts)

    @property
    def complete(self) -> bool:
        return len(self.outcomes) >= self.need

    @property
    def exhausted(self) -> bool:
        """Every member ended or was cut, and not `need` of them ended: an earlier run
        cut this group at `group_timeout_s`."""
        return not self.complete and len(self.outcomes) + self.settled >= len(self.members)


async def stream_groups(
    ec: BatchClient,
    spec: EpisodeSpec,
    *,
    batch: str | None,
    limit: int,
    max_staleness: int | None,
    on_stale: OnStale = "keep",
) -> AsyncGenerator[Group, None]:
    """`run_batch(groups=True)`: see the module doc. At most `limit` episodes in flight;
    groups are dispatched in task order, a stale one ahead of the rest."""
    name = batch or spec.name
    size = spec.samples + spec.oversample
    dataset = spec.load_tasks()
    receipts = Receipts(ec.client, ec.task_queue, name, groups=len(dataset))
    kept = await receipts.read()  # a trainer that restarted: what it acknowledged
    states = [
        _State(
            i,
            t.id,
            [Member(t, s) for s in range(size)],
            need=spec.samples,
            restored=kept.versions.get(contract.group_id(name, t.id)),
        )
        for i, t in enumerate(dataset)
        if contract.group_id(name, t.id) not in kept.acked
    ]
    pacing = Pacing(max_staleness, on_stale)
    by_index = {g.index: g for g in states}
    ec.zero_variance_skipped = ec.groups_dropped = ec.episodes_ran = 0
    queue: deque[tuple[_State, Member]] = deque((g, m) for g in states for m in g.members)
    running: dict[asyncio.Task[Outcome], tuple[_State, Member]] = {}
    # Dispatched and not yielded yet: about `limit / samples` groups, whatever the batch.
    active: dict[int, _State] = {}
    ready: list[_State] = []  # complete, held back by a stale running group (`keep`)
    spent = Spending(spec.budget)  # past the budget no group starts (ec.budget_exhausted)

    def running_groups() -> list[Running]:
        return [
            Running(g.version, g.restored is not None and g.version == g.restored)
            for g in active.values()
            if not (g.complete or g.exhausted)
        ]

    async def stop(g: _State, why: Cut | None = None) -> None:
        """Cancel the group's running members and their episodes (by id: one still
        being started has no handle yet), `cut` for `why` when given; its members not
        dispatched yet leave the queue."""
        mine = [(t, m) for t, (owner, m) in running.items() if owner is g]
        for t, _ in mine:
            t.cancel()
        for t, _ in mine:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
            del running[t]
        if why is None:
            await asyncio.gather(*(cancel_episode(ec.client, m.wid) for _, m in mine))
        else:
            await asyncio.gather(*(cut_episode(ec.client, m.wid, why) for _, m in mine))
            g.cut += [m.wid for _, m in mine if m.wid is not None]
        rest = [(o, m) for o, m in queue if o is not g]
        queue.clear()
        queue.extend(rest)

    def out(g: _State, *, partial: bool = False) -> Group | None:
        """The group to yield, or None: skipped for zero variance (and counted)."""
        group = _group(ec, name, g, model=spec.model is not None, partial=partial, ack=receipts.ack)
        if spec.skip_zero_variance and group.zero_variance:
            ec.zero_variance_skipped += 1
            return None
        return group

    try:
        while True:
            current = ec.policy_version
            if pacing.requeue:
                for i in sorted(active, reverse=True):
                    g = by_index[i]
                    if g.complete or g.exhausted or not pacing.stale(current, g.version):
                        continue
                    # Stale and not complete: cancel it and dispatch it whole again.
                    await stop(g)
                    for m in g.members:
                        m.wid = None
                    g.outcomes.clear()
                    g.cut, g.settled = [], 0
                    g.stale += 1
                    g.dispatched, g.version, g.restored = False, None, None
                    del active[i]
                    queue.extendleft(reversed([(g, m) for m in g.members]))
            if spec.group_timeout_s is not None:
                now = time.monotonic()
                for i in sorted(active):
                    g = by_index[i]
                    if g.complete or now - g.began < spec.group_timeout_s:
                        continue
                    # Past its time: cut the rest, yield what ended (or drop it).
                    await stop(g, "group_timeout")
                    del active[i]
                    if spec.group_on_timeout == "drop":
                        ec.groups_dropped += 1
                    elif group := out(g, partial=True):
                        yield group
            # Complete groups the pacing held back, oldest first, once nothing holds them.
            while ready and not pacing.holds(ec.policy_version, running_groups()):
                g = min(ready, key=lambda g: yield_order(g.version, g.index))
                ready.remove(g)
                if group := out(g):
                    yield group
            while len(running) < limit and queue:
                g, m = queue[0]
                if not g.dispatched and spent.reached is not None:
                    rest = [(o, x) for o, x in queue if o.dispatched]
                    queue.clear()
                    queue.extend(rest)
                    continue
                if not g.dispatched and not pacing.admits(ec.policy_version, running_groups()):
                    break  # `keep`: a running group is stale, no new one starts
                queue.popleft()
                if not g.dispatched:
                    g.dispatched, g.version = True, ec.policy_version
                    if g.restored is not None:  # an earlier run dispatched it: its version
                        g.version = g.restored
                    elif g.version is not None:
                        await receipts.dispatched(contract.group_id(name, g.task_id), g.version)
                    g.began = time.monotonic()
                    active[g.index] = g
                t = asyncio.create_task(
                    run_member(
                        ec,
                        dispatch_spec(spec, g.version, ec.upstreams),
                        m,
                        batch=batch,
                        budget=spec.group_retries,
                        keep_cut=True,
                        spent=spent,  # every attempt, a cut one too: it spent
                    )
                )
                running[t] = (g, m)
            if not running:
                for g in sorted(ready, key=lambda g: yield_order(g.version, g.index)):
                    if group := out(g):
                        yield group
                return
            done, _ = await asyncio.wait(
                running, timeout=VERSION_POLL_S, return_when=asyncio.FIRST_COMPLETED
            )
            finished: list[_State] = []
            for t in done:
                g, m = running.pop(t)
                o = t.result()
                ec.budget_exhausted = ec.budget_exhausted or spent.reached
                if o.result.cut is not None:  # an earlier run of the batch cut it
                    g.cut.append(o.result.workflow_id)
                    g.settled += 1
                else:
                    g.outcomes[m.sample] = o
                    ec.episodes_ran += 1  # yielded or not (a skipped or dropped group)
                if (g.complete or g.exhausted) and g not in finished:
                    finished.append(g)
            for g in sorted(finished, key=lambda g: yield_order(g.version, g.index)):
                if g.exhausted:  # as that run left it: partial, or dropped
                    del active[g.index]
                    if spec.group_on_timeout == "drop":
                        ec.groups_dropped += 1
                    elif group := out(g, partial=True):
                        yield group
                    continue
                await stop(g, "straggler")  # its spares (`oversample`) still running
                ready.append(g)  # yielded at the loop's top, once nothing holds it
                del active[g.index]
    finally:
        tasks = list(running)
        for t in tasks:
            t.cancel()
        await asyncio.gather(
            *(cancel_episode(ec.client, m.wid) for _, m in running.values()),
            return_exceptions=True,
        )


def _group(
    ec: BatchClient,
    batch: str,
    g: _State,
    *,
    model: bool,
    partial: bool = False,
    ack: Ack | None = None,
) -> Group:
    ended = [m for m in g.members if m.sample in g.outcomes]
    outcomes = [g.outcomes[m.sample] for m in ended]
    failed = None
    for m, o in zip(ended, outcomes, strict=True):
        if o.infra:
            why = o.result.error or "no detail"
            failed = (
                f"{o.result.workflow_id}: {o.result.termination} after {m.retries} "
                f"re-run(s) ({why[:300]})"
            )
            break
    group = Group(
        group_id=contract.group_id(batch, g.task_id),
        batch=batch,
        task_id=g.task_id,
        policy_version=g.version,
        results=[o.result for o in outcomes],
        failed=failed,
        retried=sum(m.retries for m in g.members),
        stale=g.stale,
        staleness=lag(ec.policy_version, oldest_serving_version(g.version)),
        partial=partial,
        cut=list(g.cut),
    )
    return reading(group, ec.transcript, model=model, ack=ack)
