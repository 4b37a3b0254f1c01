"""A batch workflow's groups (`spec.execution: group`): one child EpisodeGroupWorkflow a
task instead of one EpisodeWorkflow a sample (`workflows/group.py`).

A group runs again whole, as `<batch>.<task>.g.r<n>`, while a member ended for an
infrastructure reason and `spec.batch_retries` allow; each member's outcome is then
folded into the batch's metrics as an episode's is. A re-run batch finds the group
already started and awaits its result (`await_group`, on the side queue).
`group_timeout_s` cuts a group's members still running as on the client's path
(`cut: group_timeout`); the batch records a cut member `cancelled`, unrewarded.

Deterministic: a batch workflow runs it; models only.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ActivityError, ChildWorkflowError, WorkflowAlreadyStartedError
from temporalio.workflow import ParentClosePolicy

from workflows.outcome import MemberOutcome, root_cause

with workflow.unsafe.imports_passed_through():
    from episodes import contract
    from episodes import search_attributes as sa
    from episodes.types.group import (
        GroupInput,
        GroupResult,
        MemberState,
        group_workflow_id,
        member_result,
    )
    from episodes.types.io import BatchInput
    from episodes.types.results import WORKFLOW_FAILED, Task, is_infra_failure

# Histories from before a batch's groups honoured `group_timeout_s` (it was dropped):
# their group workflows started without it.
GROUP_TIMEOUT_PATCH = "batch-group-timeout"


async def group_outcomes(
    batch: str, inp: BatchInput, index: int, task: Task
) -> list[MemberOutcome]:
    """The group's members as the batch records them, in sample order (work indices
    `index` .. `index + samples - 1`)."""
    spec = inp.spec
    attempt = 0
    while True:
        wid = contract.retry_id(group_workflow_id(batch, task.id), attempt)
        began = workflow.now()
        try:
            results = (await _run(batch, inp, task, wid)).results
        except (ChildWorkflowError, ActivityError) as e:
            results = [
                member_result(
                    wid,
                    spec,
                    task.id,
                    MemberState(sample=s),
                    termination=WORKFLOW_FAILED,
                    error=f"{wid}: {root_cause(e)}",
                    duration_s=(workflow.now() - began).total_seconds(),
                )
                for s in range(spec.samples)
            ]
        infra = any(is_infra_failure(r.termination) for r in results)
        if infra and attempt < spec.batch_retries:
            attempt += 1
            continue
        return [
            MemberOutcome(
                index + r.sample,
                task.id,
                r.sample,
                r.termination,
                r.reward,
                r.duration_s,
                error=r.error if r.termination == WORKFLOW_FAILED else None,
                infra=is_infra_failure(r.termination),
                retries=attempt,
                model_calls=r.model_calls,
                model_tokens=r.model_tokens,
                cost=r.cost,
            )
            for r in results
        ]


async def _run(batch: str, inp: BatchInput, task: Task, wid: str) -> GroupResult:
    spec = inp.spec
    timeout = spec.group_timeout_s
    if timeout is not None and not workflow.patched(GROUP_TIMEOUT_PATCH):
        timeout = None
    try:
        return await workflow.execute_child_workflow(
            contract.GROUP_WORKFLOW,
            GroupInput(
                spec=contract.single_task_spec(spec, task),
                task=task,
                samples=spec.samples,
                batch=batch,
                group_timeout_s=timeout,
            ),
            id=wid,
            result_type=GroupResult,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY,
            parent_close_policy=ParentClosePolicy.REQUEST_CANCEL,
            search_attributes=sa.episode_search_attributes(spec, task, batch, inp.schedule),
            priority=sa.task_priority(spec),
            static_summary=f"{spec.env} · task {task.id} · {spec.samples} samples (group)",
        )
    except WorkflowAlreadyStartedError:
        return await workflow.execute_activity(
            contract.await_group,
            wid,
            task_queue=contract.side_queue(workflow.info().task_queue),
            start_to_close_timeout=timedelta(days=1),
            heartbeat_timeout=timedelta(seconds=30),
            retry_policy=RetryPolicy(
                maximum_attempts=10, non_retryable_error_types=[contract.EPISODE_FAILED]
            ),
            summary=f"await existing {wid}",
        )
