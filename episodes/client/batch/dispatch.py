"""One member of a client-side batch: its episode, run again as a fresh one after an
infrastructure failure, and the record of a workflow that failed.

`run_member` is the loop both `run_batch` streams share (episodes one by one, or whole
groups): start `<batch>.<task>.s<sample>` (or attach to it), and while it ends for an
infrastructure reason (`episodes.types.results.is_infra_failure`) and the retries
allow, run the next attempt `<id>.r<n>`. Each attempt counts against the batch's
budget as it ends (`episodes.client.batch.spending`), a failed workflow with the
model use its history recorded; past the budget no attempt is run again. `Member` keeps the next attempt number and
the id in flight, so a caller that cancels the member (a stale group, a trainer that
left) cancels that episode by id and never reuses the id.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Protocol

from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ActivityError, ApplicationError, FailureError

from episodes import contract
from episodes.client.batch.spending import Spending
from episodes.client.histories.transcript import recorded_usage
from episodes.client.starting import start_episode
from episodes.errors import EpisodeFailed, EpisodesError
from episodes.types.model import ModelSpec, UpstreamSpec
from episodes.types.priority import BudgetName
from episodes.types.results import (
    WORKFLOW_FAILED,
    Cut,
    EpisodeResult,
    Task,
    Transcript,
    is_infra_failure,
)
from episodes.types.spec import EpisodeSpec


class BatchClient(Protocol):
    """What a batch stream needs of the client it runs on (`EpisodesClient`): the
    connection, the version and fleet episodes are dispatched at, and the counters it
    reports what the last stream did in."""

    client: Client
    task_queue: str
    policy_version: int | None
    upstreams: list[UpstreamSpec] | None
    budget_exhausted: BudgetName | None
    zero_variance_skipped: int
    groups_dropped: int
    episodes_ran: int

    async def transcript(self, workflow_id: str) -> Transcript: ...


@dataclass
class Member:
    """One (task, sample) of a batch across its attempts."""

    task: Task
    sample: int
    attempt: int = 0
    """The next attempt number: taken before its start, so no id is started twice."""
    retries: int = 0
    """Fresh episodes run for it after infrastructure failures."""
    wid: str | None = None
    """The episode being started or awaited (to cancel it by id)."""


@dataclass
class Outcome:
    result: EpisodeResult
    infra: bool
    """It ended for an infrastructure reason, after the retries its budget allowed."""


def dispatch_spec(
    spec: EpisodeSpec, policy_version: int | None, upstreams: list[UpstreamSpec] | None = None
) -> EpisodeSpec:
    """The spec an episode is dispatched with: `model.policy_version` set (recorded on
    every model call the episode makes) and `model.upstreams` replaced by the client's
    fleet (`EpisodesClient.upstreams`) when given, each replica's `policy_version`
    stamped with when it was declared (`policy_version_at`: now, unless given)."""
    if policy_version is None and upstreams is None:
        return spec
    if spec.model is None:
        what = f"policy_version {policy_version}" if policy_version is not None else "upstreams"
        raise EpisodesError(
            f"{what}: spec {spec.name!r} has no `model`; it applies to the model calls of "
            "its proxy (add a `model`, or drop it)"
        )
    update: dict[str, object] = {}
    if policy_version is not None:
        update["policy_version"] = policy_version
    if upstreams is not None:
        # A replica's version is stamped with when it was declared (now, unless the
        # trainer stamped it): workers keep the latest (UpstreamSpec.policy_version_at).
        now = time.time()
        update["upstreams"] = [
            u.model_copy(update={"policy_version_at": now})
            if u.policy_version is not None and u.policy_version_at is None
            else u
            for u in upstreams
        ]
        update["base_url"] = None
    model = ModelSpec.model_validate({**spec.model.model_dump(), **update})
    return spec.model_copy(update={"model": model})


async def run_member(
    ec: BatchClient,
    spec: EpisodeSpec,
    m: Member,
    *,
    batch: str | None,
    budget: int,
    keep_cut: bool = False,
    spent: Spending | None = None,
) -> Outcome:
    """The member's result: an infrastructure failure runs again as a fresh episode while
    `m.retries < budget`; a failed workflow is a `workflow_failed` result, not a raise.
    `keep_cut` (groups): an earlier run's cut episode is its result (`result.cut`), not
    run again: its group was settled without it. `spent`: the batch's spending, which
    counts every attempt as it ends (a failed workflow with what its history
    recorded); past its budget no attempt is run again."""

    def over() -> bool:
        return spent is not None and spent.reached is not None

    while True:
        attempt, m.attempt = m.attempt, m.attempt + 1
        m.wid = contract.retry_id(
            contract.episode_id(batch or spec.name, m.task.id, m.sample), attempt
        )
        began = time.monotonic()
        handle, closed = await start_episode(
            ec.client, ec.task_queue, spec, m.task, m.sample, batch=batch, attempt=attempt
        )
        try:
            result = await await_result(handle)
        except EpisodeFailed as e:
            failed = failed_result(spec, m.task, m.sample, e, time.monotonic() - began)
            if spent is not None:
                usage = await recorded_usage(ec.client, e.workflow_id)
                failed = failed.model_copy(update=usage.model_dump())
                spent.add(failed)
            if e.provision_failed and m.retries < budget and not over():
                m.retries += 1
                continue
            return Outcome(
                failed.model_copy(update={"retries": m.retries}),
                is_infra_failure(WORKFLOW_FAILED, provision_failed=e.provision_failed),
            )
        if spent is not None:
            spent.add(result)
        if closed and result.termination == "cancelled" and not (keep_cut and result.cut):
            # Cancelled when an earlier run_batch was left (Ctrl-C, an exception in the
            # trainer's loop) or a stale group was dispatched again: its id is closed for
            # good, so run the next attempt. Cancelled while this run waits: its result.
            continue
        infra = is_infra_failure(result.termination)
        if infra and m.retries < budget and not over():
            m.retries += 1
            continue
        return Outcome(result.model_copy(update={"retries": m.retries}), infra)


async def cancel_episode(client: Client, workflow_id: str | None) -> None:
    """Ask the episode to cancel (it releases its box); quietly, it may be closed."""
    if workflow_id is None:
        return
    with contextlib.suppress(Exception):
        await client.get_workflow_handle(workflow_id).cancel()


async def cut_episode(client: Client, workflow_id: str | None, why: Cut) -> None:
    """Cancel the episode as `cancel_episode` does, its result marked `cut=why` first
    (the `cut` signal): a straggler or a member past `group_timeout_s`, never exported."""
    if workflow_id is None:
        return
    handle = client.get_workflow_handle(workflow_id)
    with contextlib.suppress(Exception):  # it may have closed meanwhile: its result stands
        await handle.signal(contract.CUT, why)
    with contextlib.suppress(Exception):
        await handle.cancel()


async def await_result(handle: WorkflowHandle) -> EpisodeResult:
    try:
        return await handle.result()
    except WorkflowFailureError as e:
        raise failed(handle.id, e) from None


def failed(workflow_id: str, cause: BaseException) -> EpisodeFailed:
    detail = cause.cause if isinstance(cause, WorkflowFailureError) else cause
    # `provision` failed after Temporal's retries for a non-harness reason.
    provision_failed = (
        isinstance(detail, ActivityError) and detail.activity_type == contract.PROVISION
    )
    root = detail
    while isinstance(root, FailureError) and root.cause is not None:
        root = root.cause  # "Activity task failed" says nothing: the innermost does
    message = str(detail) if root is detail else f"{detail}: {root}"
    config = isinstance(root, ApplicationError) and root.type in contract.SPEC_ERRORS
    if isinstance(root, ApplicationError) and config:
        message = root.message  # the one line that says what to fix
    return EpisodeFailed(
        workflow_id, message, provision_failed=provision_failed, config_error=config
    )


def failed_result(
    spec: EpisodeSpec, task: Task, sample: int, e: EpisodeFailed, duration_s: float
) -> EpisodeResult:
    """A batch's record of an episode whose workflow failed (as EvalBatchWorkflow's)."""
    return EpisodeResult(
        workflow_id=e.workflow_id,
        task_id=task.id,
        sample=sample,
        env=spec.env,
        spec_name=spec.name,
        termination=WORKFLOW_FAILED,
        # A configuration error is the same line for every episode: printed once.
        error=e.detail if e.config_error else str(e),
        turns=0,
        duration_s=duration_s,
        config_error=e.config_error,
    )
