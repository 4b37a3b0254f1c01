"""EpisodeGroupWorkflow: the members of one group (a task's samples) as one workflow.

Opt-in group execution (`run_batch(groups=True, execution="group")`; the design is in
`episodes.types.group` and docs/training.md). One `run_group` activity on any worker
drives every member to its end in-process and heartbeats their turns; the server
retries it on another worker when that worker goes silent (`on_worker_lost: restart`,
up to `max_restarts` retries), and the retry restores each member that had not ended
from the last heartbeat. Past the retries, the members that had not ended end
`worker_lost` with the turns the last heartbeat recorded.

Deterministic: one activity, its result folded into the group's result; models only.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, TimeoutError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    from episodes import contract
    from episodes import search_attributes as sa
    from episodes.types.group import (
        GroupInput,
        GroupProgress,
        GroupResult,
        MemberState,
        member_result,
    )
    from episodes.types.results import EpisodeResult, Termination


# Histories from before a group's members waited for places on their worker: the
# activity's deadline was one member's.
BACKSTOP_PER_MEMBER_PATCH = "group-backstop-per-member"


@workflow.defn(name=contract.GROUP_WORKFLOW)
class EpisodeGroupWorkflow:
    def __init__(self) -> None:
        self._status = "running"
        self._results: list[EpisodeResult] = []

    @workflow.query(name=contract.PROGRESS)
    def progress(self) -> dict[str, object]:
        """The group's status and, once it ended, its members' results."""
        return {
            "status": self._status,
            "results": [r.model_dump(mode="json") for r in self._results],
        }

    @workflow.run
    async def run(self, inp: GroupInput) -> GroupResult:
        spec = inp.spec
        wid = workflow.info().workflow_id
        inp = inp.model_copy(update={"group_workflow_id": wid})
        restarts = spec.max_restarts if spec.on_worker_lost == "restart" else 0
        h = spec.harness
        per_turn = spec.turn_timeout_s + 2 * h.stop_timeout_s + 30
        # One attempt: open every member, replay what a lost attempt recorded, turn on.
        backstop = h.ready_timeout_s + 300 + 2 * spec.max_turns * per_turn + spec.score_timeout_s
        if inp.size > 1 and workflow.patched(BACKSTOP_PER_MEMBER_PATCH):
            # A worker short of places runs the members a few at a time (max_sessions).
            backstop *= inp.size
        workflow.set_current_details(f"**running** · {inp.samples} members")
        termination: Termination | None = None
        error: str | None = None
        try:
            progress = await workflow.execute_activity(
                contract.run_group,
                inp,
                start_to_close_timeout=timedelta(seconds=backstop),
                heartbeat_timeout=timedelta(seconds=spec.worker_lost_timeout_s),
                retry_policy=RetryPolicy(
                    maximum_attempts=1 + restarts,
                    initial_interval=timedelta(seconds=1),
                    non_retryable_error_types=list(contract.SPEC_ERRORS),
                ),
                summary=f"run {inp.samples} members of {inp.task.id}",
            )
        except (asyncio.CancelledError, ActivityError) as e:
            if is_cancelled_exception(e):
                progress, termination = GroupProgress(), "cancelled"
                error = "the group was cancelled"
            elif isinstance(e, ActivityError) and isinstance(e.cause, TimeoutError):
                # Lost past its restarts: what the last heartbeat recorded.
                details = e.cause.last_heartbeat_details
                progress = GroupProgress.model_validate(details[0]) if details else GroupProgress()
                termination = "worker_lost"
                error = f"the group's worker was lost ({restarts} restart(s) allowed): {e.cause}"
            else:
                raise
        self._results = _results(inp, wid, progress, termination, error)
        self._status = "done"
        # A cut member (`oversample`, `group_timeout_s`) is in no group: not in the mean.
        rewards = [r.reward for r in self._results if r.reward is not None and r.cut is None]
        workflow.upsert_search_attributes(
            [
                sa.TURNS.value_set(sum(r.turns for r in self._results)),
                *([sa.REWARD.value_set(sum(rewards) / len(rewards))] if rewards else []),
            ]
        )
        ends: dict[str, int] = {}
        for r in self._results:
            ends[r.termination] = ends.get(r.termination, 0) + 1
        workflow.set_current_details(
            "**done** · " + ", ".join(f"`{k}` {n}" for k, n in sorted(ends.items()))
        )
        return GroupResult(workflow_id=wid, task_id=inp.task.id, results=self._results)


def _results(
    inp: GroupInput,
    wid: str,
    progress: GroupProgress,
    termination: Termination | None,
    error: str | None,
) -> list[EpisodeResult]:
    """One per member (samples and spares): its own result, or (it had not ended)
    `termination`."""
    by_sample = {m.sample: m for m in progress.members}
    out: list[EpisodeResult] = []
    for s in range(inp.size):
        m = by_sample.get(s) or MemberState(sample=s)
        if m.result is not None:
            out.append(m.result)
            continue
        out.append(
            member_result(
                wid,
                inp.spec,
                inp.task.id,
                m,
                termination=termination or "worker_lost",
                error=error,
                duration_s=(workflow.now() - workflow.info().start_time).total_seconds(),
            )
        )
    return out
