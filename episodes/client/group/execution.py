"""`run_batch(groups=True, execution="group")`: one workflow per group (opt-in).

Each task's `samples` members run as one `EpisodeGroupWorkflow` (`<batch>.<task>.g`;
design: `episodes.types.group`, docs/training.md "Group execution") instead of one
`EpisodeWorkflow` each: the server's cost is paid once per group, not per episode.
Groups are yielded as `episodes.client.group.stream.Group`s, exactly as the default path
yields them; each result's `workflow_id` is the member's id
(`<batch>.<task>.g.s<sample>`), which `episodes show`, the viewer, `episodes export`
and `Group.samples()` accept.

A group with a member that ended for an infrastructure reason (its worker lost past
its restarts, a model upstream that gave up: `is_infra_failure`) runs again whole, as
a fresh group workflow `<id>.r<n>`, up to the spec's `group_retries` times (the unit
of execution is the group; a GRPO baseline wants its members run alike); past that
it is yielded `failed`. `max_staleness` paces a stale group (`on_stale="keep"`: no
new group starts and no complete one is handed out past it) or cancels its workflow
and dispatches it again at the current version (`on_stale="requeue"`):
`episodes.client.group.staleness`. `Group.ack()` records the group in the batch's
receipts, so a trainer that runs the batch again never gets it again
(`episodes.client.group.receipts`).

As on the default path (`episodes.client.group.stream`): budgets are counted from the
members' results as each group attempt ends (a group run again spent too) (past one no new group starts,
`client.budget_exhausted` names it); `skip_zero_variance` skips a zero-variance group
and counts it (`client.zero_variance_skipped`); `oversample: k` runs `samples + k`
members in the group's activity, which ends the group once `samples` ended and cuts
the rest (`cut: straggler`, `Group.cut`, never exported); `group_timeout_s` cuts the
members still running that long after the group's activity was first scheduled
(`cut: group_timeout`) and the group is yielded `partial` or dropped
(`group_on_timeout`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

from temporalio.client import WorkflowFailureError, WorkflowHandle

from episodes import contract
from episodes.client.batch.dispatch import BatchClient, cancel_episode, dispatch_spec, failed
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
from episodes.client.group.stream import VERSION_POLL_S, Group, reading
from episodes.client.starting import start_options, start_or_attach
from episodes.errors import EpisodesError
from episodes.types.group import (
    GroupInput,
    GroupResult,
    MemberState,
    group_workflow_id,
    member_result,
)
from episodes.types.results import WORKFLOW_FAILED, EpisodeResult, Task, is_infra_failure
from episodes.types.spec import EpisodeSpec


def run_group_execution(
    ec: BatchClient,
    spec: EpisodeSpec,
    batch: str | None,
    limit: int,
    max_staleness: int | None,
    *,
    groups: bool,
    on_stale: OnStale = "keep",
) -> AsyncGenerator[Group, None] | AsyncGenerator[EpisodeResult, None]:
    """`run_batch(..., execution="group")`: the groups, or (not `groups`) their
    results one by one as each group ends."""
    if max_staleness is not None and (not groups or ec.policy_version is None):
        raise EpisodesError(
            "max_staleness applies to groups with a policy version: pass groups=True "
            "and policy_version="
        )
    grouped = stream_group_workflows(
        ec, spec, batch=batch, limit=limit, max_staleness=max_staleness, on_stale=on_stale
    )
    return grouped if groups else _flat(grouped)


async def _flat(groups: AsyncGenerator[Group, None]) -> AsyncGenerator[EpisodeResult, None]:
    try:
        async for group in groups:
            for result in group.results:
                yield result
    finally:
        await groups.aclose()  # now: it cancels the group workflows left


@dataclass
class _Run:
    index: int
    task: Task
    version: int | None = None
    attempt: int = 0  # the next group workflow attempt number
    retries: int = 0
    stale: int = 0
    wid: str | None = None  # the group workflow in flight (to cancel it by id)
    dispatched: bool = False
    restored: int | None = None  # the version an earlier run dispatched it at (receipts)


async def stream_group_workflows(
    ec: BatchClient,
    spec: EpisodeSpec,
    *,
    batch: str | None,
    limit: int,
    max_staleness: int | None,
    on_stale: OnStale = "keep",
) -> AsyncGenerator[Group, None]:
    """See the module doc. At most `limit` episodes in flight: `limit // (samples +
    oversample)` groups (at least one), dispatched in task order, a stale one ahead of
    the rest."""
    name = batch or spec.name
    tasks = spec.load_tasks()
    receipts = Receipts(ec.client, ec.task_queue, name, groups=len(tasks))
    kept = await receipts.read()  # a trainer that restarted: what it acknowledged
    queue = deque(
        _Run(i, t, restored=kept.versions.get(contract.group_id(name, t.id)))
        for i, t in enumerate(tasks)
        if contract.group_id(name, t.id) not in kept.acked
    )
    pacing = Pacing(max_staleness, on_stale)
    ready: list[tuple[_Run, Group]] = []  # complete, held back by a stale group (`keep`)
    groups = max(1, limit // (spec.samples + spec.oversample))
    running: dict[asyncio.Task[tuple[list[EpisodeResult], bool]], _Run] = {}
    model = spec.model is not None
    ec.zero_variance_skipped = ec.groups_dropped = ec.episodes_ran = 0
    spent = Spending(spec.budget)  # past the budget no group starts (ec.budget_exhausted)

    def running_groups() -> list[Running]:
        return [
            Running(g.version, g.restored is not None and g.version == g.restored)
            for g in running.values()
        ]

    def out(g: _Run, group: Group) -> Group:
        # Its lag as the trainer's version stands when it is handed out.
        v = oldest_serving_version(g.version)
        return group.model_copy(update={"staleness": lag(ec.policy_version, v)})

    try:
        while True:
            current = ec.policy_version
            if pacing.requeue:
                for t, g in sorted(running.items(), key=lambda kv: -kv[1].index):
                    if not pacing.stale(current, g.version):
                        continue
                    t.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await t
                    del running[t]
                    await cancel_episode(ec.client, g.wid)
                    g.stale, g.version, g.wid, g.restored = g.stale + 1, None, None, None
                    queue.appendleft(g)
            # Complete groups the pacing held back, oldest first, once nothing holds them.
            while ready and not pacing.holds(ec.policy_version, running_groups()):
                g, group = min(ready, key=lambda x: yield_order(x[0].version, x[0].index))
                ready.remove((g, group))
                yield reading(out(g, group), ec.transcript, model=model, ack=receipts.ack)
            while len(running) < groups and queue:
                g = queue[0]
                if not g.dispatched and spent.reached is not None:
                    queue.popleft()
                    continue  # past the budget: no new group (a stale one runs again)
                if not g.dispatched and not pacing.admits(ec.policy_version, running_groups()):
                    break  # `keep`: a running group is stale, no new one starts
                queue.popleft()
                if g.restored is not None and not g.dispatched:
                    g.version = g.restored  # an earlier run dispatched it: its version
                else:
                    g.version = ec.policy_version
                    if g.version is not None:
                        await receipts.dispatched(contract.group_id(name, g.task.id), g.version)
                g.dispatched = True
                t = asyncio.create_task(
                    _run_group(ec, dispatch_spec(spec, g.version, ec.upstreams), g, name, spent)
                )
                running[t] = g
            if not running:
                for g, group in sorted(ready, key=lambda x: yield_order(x[0].version, x[0].index)):
                    yield reading(out(g, group), ec.transcript, model=model, ack=receipts.ack)
                return
            done, _ = await asyncio.wait(
                running, timeout=VERSION_POLL_S, return_when=asyncio.FIRST_COMPLETED
            )
            for t in sorted(done, key=lambda t: yield_order(running[t].version, running[t].index)):
                g = running.pop(t)
                results, infra = t.result()
                ec.budget_exhausted = ec.budget_exhausted or spent.reached  # every attempt
                for r in results:
                    ec.episodes_ran += r.cut is None  # yielded or not
                group = _group(ec, name, g, results, infra, model=model)
                if group.partial and spec.group_on_timeout == "drop":
                    ec.groups_dropped += 1
                    continue
                if spec.skip_zero_variance and group.zero_variance:
                    ec.zero_variance_skipped += 1
                    continue
                ready.append((g, group))  # yielded at the loop's top, once nothing holds it
    finally:
        for t in running:
            t.cancel()
        await asyncio.gather(
            *(cancel_episode(ec.client, g.wid) for g in running.values()),
            return_exceptions=True,
        )


async def _run_group(
    ec: BatchClient, spec: EpisodeSpec, g: _Run, batch: str, spent: Spending
) -> tuple[list[EpisodeResult], bool]:
    """The group's results (one per sample), run again whole as a fresh group workflow
    while a member ended for an infrastructure reason, `group_retries` allow and the
    budget is not spent; and whether one still did. Every attempt's members count
    against the budget as the attempt ends (`spent`)."""
    while True:
        attempt, g.attempt = g.attempt, g.attempt + 1
        g.wid = contract.retry_id(group_workflow_id(batch, g.task.id), attempt)
        began = time.monotonic()
        handle, closed = await _start(ec, spec, g.task, batch, g.wid)
        try:
            out = await handle.result()
            results = out.results
        except WorkflowFailureError as e:
            why = failed(g.wid, e)
            results = [
                member_result(
                    g.wid,
                    spec,
                    g.task.id,
                    MemberState(sample=s),
                    termination=WORKFLOW_FAILED,
                    error=why.detail if why.config_error else str(why),
                    duration_s=time.monotonic() - began,
                    config_error=why.config_error,
                )
                for s in range(spec.samples)
            ]
            if why.config_error:
                for r in results:
                    spent.add(r)
                return results, False  # the same spec fails the same way: never again
        for r in results:  # a cut member spent too
            spent.add(r)
        if closed and any(r.termination == "cancelled" and r.cut is None for r in results):
            continue  # cancelled by an earlier run (Ctrl-C, a stale dispatch): run anew
        infra = any(is_infra_failure(r.termination) for r in results if r.cut is None)
        if infra and g.retries < spec.group_retries and spent.reached is None:
            g.retries += 1
            continue
        return results, infra


async def _start(
    ec: BatchClient, spec: EpisodeSpec, task: Task, batch: str, wid: str
) -> tuple[WorkflowHandle[Any, GroupResult], bool]:
    """Start the group workflow, or attach to the one under its id (and say it closed)."""
    inp = GroupInput(
        spec=contract.single_task_spec(spec, task),
        task=task,
        samples=spec.samples,
        batch=batch,
        oversample=spec.oversample,
        group_timeout_s=spec.group_timeout_s,
    )
    options = start_options(
        spec,
        task,
        batch,
        workflow_id=wid,
        task_queue=ec.task_queue,
        summary=f"{spec.env} · task {task.id} · {spec.samples} samples (group)",
        eager=True,
    )
    return await start_or_attach(ec.client, contract.GROUP_WORKFLOW, inp, GroupResult, options)


def _group(
    ec: BatchClient,
    batch: str,
    g: _Run,
    results: list[EpisodeResult],
    infra: bool,
    *,
    model: bool,
) -> Group:
    ended = [r for r in results if r.cut is None]
    failed_why = None
    if infra:
        bad = next(r for r in ended if is_infra_failure(r.termination))
        failed_why = (
            f"{bad.workflow_id}: {bad.termination} after {g.retries} re-run(s) of the group "
            f"({(bad.error or 'no detail')[:300]})"
        )
    group = Group(
        group_id=contract.group_id(batch, g.task.id),
        batch=batch,
        task_id=g.task.id,
        policy_version=g.version,
        results=[r.model_copy(update={"retries": g.retries}) for r in ended],
        failed=failed_why,
        retried=g.retries * len(results),
        stale=g.stale,
        partial=any(r.cut == "group_timeout" for r in results),
        cut=[r.workflow_id for r in results if r.cut is not None],
    )
    return reading(group, ec.transcript, model=model)
