"""How the client starts a workflow for episodes: its id, task queue, search attributes,
priority, id policies and summary, built by one function, and the start itself.

An episode (`EpisodesClient.start_episode`, a client-side batch's member), a group
workflow (`run_batch(execution="group")`) and a fork's branch all start the same way:
findable by their spec, task and batch (`episodes.search_attributes`), with the
batch's manifest in their memo (`episodes.evals.manifest`), carrying the
batch's priority and fairness (the server hands them down to their activities), a
finished one never run twice (a failed one may be), and a start under an id that
exists attaches to that workflow instead (`start_or_attach` says whether it had
already closed). An interactive session's start options are these too, with its own
id reuse (a session id is reused once it ended) and no priority
(`episodes.client.interactive`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, TypeVar

from temporalio.client import Client, WorkflowHandle
from temporalio.common import (
    Priority,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import WorkflowAlreadyStartedError

from episodes import contract
from episodes.evals.manifest import MEMO_KEY, manifest_of
from episodes.search_attributes import episode_search_attributes, task_priority
from episodes.traces import episode_context
from episodes.types.io import EpisodeInput
from episodes.types.results import EpisodeResult, Task
from episodes.types.spec import EpisodeSpec

R = TypeVar("R")


@dataclass(frozen=True)
class StartOptions:
    """`Client.start_workflow`'s keyword arguments for one workflow of episodes."""

    id: str
    task_queue: str
    search_attributes: TypedSearchAttributes
    priority: Priority
    static_summary: str
    static_details: str | None = None
    # What the batch pinned (`episodes.evals.manifest`): `episodes compare` reads it.
    memo: dict[str, Any] | None = None
    # A finished workflow is never run twice; a failed one may be re-run.
    id_reuse_policy: WorkflowIDReusePolicy = WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY
    id_conflict_policy: WorkflowIDConflictPolicy = WorkflowIDConflictPolicy.USE_EXISTING
    request_eager_start: bool = False

    def kwargs(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def start_options(
    spec: EpisodeSpec,
    task: Task,
    batch: str,
    *,
    workflow_id: str,
    task_queue: str,
    summary: str,
    details: str | None = None,
    eager: bool = False,
) -> StartOptions:
    """The start options of a workflow running `task` of `spec` in `batch`. `eager`:
    with a worker on the queue in the same process (tests, benchmarks, a trainer
    hosting one), the first workflow task comes back with the start."""
    return StartOptions(
        id=workflow_id,
        task_queue=task_queue,
        search_attributes=episode_search_attributes(spec, task, batch),
        # The batch's priority and fairness, handed down to the workflow's activities.
        priority=task_priority(spec),
        static_summary=summary,
        static_details=details,
        memo={MEMO_KEY: manifest_of(spec)},
        request_eager_start=eager,
    )


async def start_or_attach(
    client: Client, workflow: str, arg: Any, result_type: type[R], options: StartOptions
) -> tuple[WorkflowHandle[Any, R], bool]:
    """Start the workflow, or attach to the one under its id; and whether that one had
    already closed (a closed id is never reused: the id policy above)."""
    try:
        # Traced: the start joins the episode's trace (one per workflow id).
        with episode_context(options.id):
            handle = await client.start_workflow(
                workflow, arg, result_type=result_type, **options.kwargs()
            )
    except WorkflowAlreadyStartedError:
        return client.get_workflow_handle(options.id, result_type=result_type), True
    return handle, False


async def start_episode(
    client: Client,
    task_queue: str,
    spec: EpisodeSpec,
    task: Task,
    sample: int,
    *,
    batch: str | None,
    attempt: int,
) -> tuple[WorkflowHandle[Any, EpisodeResult], bool]:
    """Start one episode (`<batch>.<task>.s<sample>`, `.r<attempt>` past the first), or
    attach to it; and whether it had already closed."""
    batch = batch or spec.name
    options = start_options(
        spec,
        task,
        batch,
        workflow_id=contract.retry_id(contract.episode_id(batch, task.id, sample), attempt),
        task_queue=task_queue,
        summary=f"{spec.env} · task {task.id} · sample {sample}",
        details=(
            f"**spec** `{spec.name}` · **batch** `{batch}`\n\n"
            f"harness: `{' '.join(spec.harness.command)}` "
            f"on `{' or '.join(r.type for r in spec.harness.runtimes)}` · "
            f"max turns {spec.max_turns}"
        ),
        eager=True,
    )
    inp = EpisodeInput(
        spec=contract.single_task_spec(spec, task), task=task, sample=sample, batch=batch
    )
    return await start_or_attach(client, contract.EPISODE_WORKFLOW, inp, EpisodeResult, options)
