"""EvalBatchWorkflow: every task x sample of a spec as child EpisodeWorkflows.

A sliding window keeps at most `concurrency` children running. Metrics are folded in
as each child finishes (`metrics` and `progress` queries). To keep the history
bounded, a run stops starting children once the server suggests continue-as-new (or
after `children_per_run`), waits for the ones in flight (drain), and continues as new
with the next work index and the metrics accumulator. Draining means no child is ever
orphaned by continue-as-new (children of a closed run would be cancelled), at the cost
of a briefly narrower window once per run.

Child ids are `<batch>.<task>.s<sample>`: a child that already exists (a re-run batch)
is not started again; its recorded result is fetched by the `await_episode` activity.

Priority and fairness (`spec.priority`, `fairness_key`, `fairness_weight`) come with
the batch's own start and the server hands them down to the children and their
activities; they are also set on each child, for a batch started without them.
Budgets (`spec.budget`) are counted in the metrics accumulator, which continue-as-new
carries and a re-run rebuilds from the episodes it re-attaches to: once one is
reached no child starts, the ones in flight finish, and the batch ends
`budget_exhausted`. (Neither changes the commands of a history recorded without
them: no patch marker.) Every attempt counts as it ends (`BUDGET_ATTEMPTS_PATCH`): an
episode run again after an infrastructure failure spent too, and a failed episode
counts the model use its history recorded (`recorded_usage`); past a budget no
attempt is run again.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    ChildWorkflowError,
    WorkflowAlreadyStartedError,
)
from temporalio.workflow import ParentClosePolicy

from workflows.batch_groups import group_outcomes
from workflows.outcome import MemberOutcome, root_cause

with workflow.unsafe.imports_passed_through():
    from episodes import contract
    from episodes import search_attributes as sa
    from episodes.types.io import (
        BatchInput,
        BatchProgress,
        BatchResult,
        BatchState,
        BatchStatus,
        EpisodeInput,
    )
    from episodes.types.metrics import BatchMetrics, MetricsAccumulator, report_ks
    from episodes.types.priority import BudgetName, exhausted
    from episodes.types.results import WORKFLOW_FAILED, EpisodeResult, Task, is_infra_failure

KEEP_ERRORS = 5
# Histories recorded before `await_episode` ran on the side queue.
SIDE_QUEUE_PATCH = "await-episode-side-queue"
# ... and before a batch ran an episode again after an infrastructure failure.
BATCH_RETRY_PATCH = "batch-infra-retries"
# ... and before `model_error` counted as one (the infrastructure set became shared,
# `episodes.types.results.is_infra_failure`): replaying an older history must not start
# the `.r<n>` episode it never started.
SHARED_INFRA_PATCH = "batch-shared-infra-set"
# ... and before its budgets counted every attempt: the model use and episode time of
# an attempt run again after an infrastructure failure, and what a failed episode's
# history recorded (read by the `recorded_usage` activity). Counting them can stop the
# batch sooner (fewer children started, no re-run past a budget) and the reading is an
# activity of its own: histories without the marker replay as they ran.
BUDGET_ATTEMPTS_PATCH = "batch-budget-every-attempt"
# What older histories re-ran: worker_lost only (and failed provisions).
LEGACY_RERUN = ("worker_lost",)


@workflow.defn(name=contract.BATCH_WORKFLOW)
class EvalBatchWorkflow:
    def __init__(self) -> None:
        self._status: BatchStatus = "running"
        self._batch = ""
        self._total = 0
        self._running = 0
        self._failed = 0
        self._runs = 1
        self._last = ""
        self._errors: list[str] = []
        self._acc = MetricsAccumulator()
        self._budget: BudgetName | None = None  # the budget reached, if any
        # Children parked now (`episode_parked` signals; one that closes leaves).
        self._parked: set[str] = set()

    @workflow.query(name=contract.PROGRESS)
    def progress(self) -> BatchProgress:
        return BatchProgress(
            status=self._status,
            batch=self._batch,
            total=self._total,
            done=self._acc.count,
            running=self._running,
            parked=len(self._parked),
            failed=self._failed,
            runs=self._runs,
            last=self._last,
        )

    @workflow.query(name=contract.METRICS)
    def metrics(self) -> BatchMetrics:
        return self._acc.summary().model_copy(update={"parked": len(self._parked)})

    @workflow.signal(name=contract.EPISODE_PARKED)
    def episode_parked(self, workflow_id: str, parked: bool) -> None:
        """A child parked (True) or resumed (False). No command: state for the
        queries and the details only, so no patch."""
        if parked:
            self._parked.add(workflow_id)
        else:
            self._parked.discard(workflow_id)
        self._set_details()

    @workflow.run
    async def run(self, inp: BatchInput) -> BatchResult:
        spec = inp.spec
        if not spec.tasks:
            raise ApplicationError(
                "the batch input must carry its tasks inline (episodes.client.batches.batch_input)",
                non_retryable=True,
            )
        tasks = spec.tasks
        state = inp.state
        self._batch = inp.batch or workflow.info().workflow_id
        self._total = len(tasks) * spec.samples
        self._runs = state.runs
        self._errors = list(state.errors)
        self._acc = state.metrics or MetricsAccumulator(
            samples=spec.samples, pass_threshold=inp.pass_threshold
        )
        self._failed = self._acc.terminations.get(WORKFLOW_FAILED, 0)
        self._budget = self._over_budget(inp)
        started_at = state.started_at or workflow.now()
        if state.runs == 1:
            self._upsert_attributes(inp)
        limit = inp.concurrency or spec.concurrency

        nxt = state.next_index
        started = 0
        in_flight: dict[asyncio.Task[list[MemberOutcome]], int] = {}
        # `execution: group` (opt-in): a child a task, its samples its members
        # (workflows/batch_groups.py); histories from before it never set it.
        groups = spec.execution == "group"
        step = spec.samples if groups else 1
        if groups:
            limit = max(1, limit // spec.samples)
        while True:
            while len(in_flight) < limit and nxt < self._total and self._budget is None:
                if started and self._should_continue_as_new(started, inp.children_per_run):
                    self._status = "draining"
                    break
                task, sample = tasks[nxt // spec.samples], nxt % spec.samples
                work = self._group(inp, nxt, task) if groups else self._one(inp, nxt, task, sample)
                in_flight[asyncio.create_task(work)] = nxt
                nxt += step
                started += 1
            self._running = len(in_flight)
            if not in_flight:
                break
            done, _ = await workflow.wait(list(in_flight), return_when=asyncio.FIRST_COMPLETED)
            # Sets iterate in memory order; record in work order so replays agree.
            for t in sorted(done, key=lambda t: in_flight[t]):
                del in_flight[t]
                for outcome in t.result():
                    self._record(outcome)
            self._check_budget(inp)
            self._running = len(in_flight)
            self._set_details()

        if nxt < self._total and self._budget is None:
            workflow.continue_as_new(
                inp.model_copy(
                    update={
                        "batch": self._batch,
                        "state": BatchState(
                            next_index=nxt,
                            metrics=self._acc,
                            runs=self._runs + 1,
                            started_at=started_at,
                            errors=self._errors,
                        ),
                    }
                )
            )
        self._status = "done" if self._budget is None else "budget_exhausted"
        summary = self._acc.summary()
        if summary.mean_reward is not None:
            workflow.upsert_search_attributes([sa.REWARD.value_set(summary.mean_reward)])
        self._set_details()
        return BatchResult(
            batch=self._batch,
            spec_name=spec.name,
            schedule=inp.schedule,
            total=self._total,
            runs=self._runs,
            elapsed_s=(workflow.now() - started_at).total_seconds(),
            metrics=summary,
            errors=self._errors,
            status=self._status,
            budget=self._budget,
        )

    # -- one child -----------------------------------------------------------------

    async def _one(
        self, inp: BatchInput, index: int, task: Task, sample: int
    ) -> list[MemberOutcome]:
        return [await self._child(inp, index, task, sample)]

    async def _group(self, inp: BatchInput, index: int, task: Task) -> list[MemberOutcome]:
        return await group_outcomes(
            self._batch, inp, index, task, lambda replaced: self._replaced(inp, replaced)
        )

    async def _child(self, inp: BatchInput, index: int, task: Task, sample: int) -> MemberOutcome:
        """The episode; one that ended for an infrastructure reason (its worker lost after
        its restarts, a provision that failed for a non-harness reason) runs again as a
        fresh episode `<id>.r1`, ... up to `spec.batch_retries` times."""
        attempt = 0
        while True:
            outcome = await self._attempt(inp, index, task, sample, attempt)
            outcome.retries = attempt
            if not outcome.infra or attempt >= inp.spec.batch_retries:
                return outcome
            if not workflow.patched(BATCH_RETRY_PATCH):
                return outcome
            if workflow.patched(BUDGET_ATTEMPTS_PATCH):
                # The attempt it replaces spent too; past a budget none is run again.
                self._spend(inp, outcome)
                if self._budget is not None:
                    return outcome
            attempt += 1

    async def _attempt(
        self, inp: BatchInput, index: int, task: Task, sample: int, attempt: int
    ) -> MemberOutcome:
        wid = contract.retry_id(contract.episode_id(self._batch, task.id, sample), attempt)
        began = workflow.now()
        try:
            return await self._run_attempt(inp, index, task, sample, wid, began)
        finally:
            self._parked.discard(wid)  # closed: parked no more (a cancel sends no signal)

    async def _run_attempt(
        self,
        inp: BatchInput,
        index: int,
        task: Task,
        sample: int,
        wid: str,
        began: datetime,
    ) -> MemberOutcome:
        spec = inp.spec
        try:
            try:
                result = await workflow.execute_child_workflow(
                    contract.EPISODE_WORKFLOW,
                    EpisodeInput(
                        spec=contract.single_task_spec(spec, task),
                        task=task,
                        sample=sample,
                        batch=self._batch,
                    ),
                    id=wid,
                    result_type=EpisodeResult,
                    # A finished episode is never run twice; a failed one may be re-run.
                    id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY,
                    # Cancelling or terminating the batch cancels its episodes, which
                    # then release their boxes.
                    parent_close_policy=ParentClosePolicy.REQUEST_CANCEL,
                    search_attributes=sa.episode_search_attributes(
                        spec, task, self._batch, inp.schedule
                    ),
                    priority=sa.task_priority(spec),
                    static_summary=f"{spec.env} · task {task.id} · sample {sample}",
                )
            except WorkflowAlreadyStartedError:
                # Its own queue: on the shared one it held a slot that gates provision.
                side = workflow.patched(SIDE_QUEUE_PATCH)
                queue = contract.side_queue(workflow.info().task_queue) if side else None
                result = await workflow.execute_activity(
                    contract.await_episode,
                    wid,
                    task_queue=queue,
                    start_to_close_timeout=timedelta(days=1),
                    heartbeat_timeout=timedelta(seconds=30),
                    retry_policy=RetryPolicy(
                        maximum_attempts=10, non_retryable_error_types=[contract.EPISODE_FAILED]
                    ),
                    summary=f"await existing {wid}",
                )
        except (ChildWorkflowError, ActivityError) as e:
            failed = MemberOutcome(
                index,
                task.id,
                sample,
                WORKFLOW_FAILED,
                None,
                (workflow.now() - began).total_seconds(),
                error=f"{wid}: {root_cause(e)}",
                infra=_provision_failed(e),
            )
            if workflow.patched(BUDGET_ATTEMPTS_PATCH):
                await self._read_usage(wid, failed)
            return failed
        return MemberOutcome(
            index,
            task.id,
            sample,
            result.termination,
            result.reward,
            result.duration_s,
            infra=self._infra(result.termination),
            model_calls=result.model_calls,
            model_tokens=result.model_tokens,
            cost=result.cost,
        )

    def _infra(self, termination: str) -> bool:
        if termination in LEGACY_RERUN:
            return True
        # Asked only where the answer can differ, so older histories without the marker
        # replay as they ran.
        return is_infra_failure(termination) and workflow.patched(SHARED_INFRA_PATCH)

    def _record(self, o: MemberOutcome) -> None:
        self._acc.add(
            o.task_id,
            o.termination,
            o.reward,
            o.duration_s,
            infra=o.infra,
            retries=o.retries,
            model_calls=o.model_calls,
            model_tokens=o.model_tokens,
            # Summed only: a history from before costs has none, and adds nothing.
            cost=o.cost,
        )
        reward = "-" if o.reward is None else f"{o.reward:.2f}"
        self._last = f"{o.task_id}#{o.sample} {o.termination} {reward}"
        if o.error is not None:
            self._failed += 1
            self._errors = [*self._errors, o.error][-KEEP_ERRORS:]

    # -- budgets -------------------------------------------------------------------

    async def _read_usage(self, wid: str, o: MemberOutcome) -> None:
        """A failed episode has no result: the model use its history recorded, into `o`
        (unreadable: nothing, a budget never fails the batch)."""
        try:
            usage = await workflow.execute_activity(
                contract.recorded_usage,
                wid,
                task_queue=contract.side_queue(workflow.info().task_queue),
                start_to_close_timeout=timedelta(minutes=5),
                retry_policy=RetryPolicy(maximum_attempts=3),
                summary=f"recorded usage of {wid}",
            )
        except ActivityError:
            return
        o.model_calls, o.model_tokens = usage.model_calls, usage.model_tokens

    def _replaced(self, inp: BatchInput, outcomes: list[MemberOutcome]) -> bool:
        """A group attempt about to run again: count what its members spent; True: past
        a budget, it is not run again (older histories: neither)."""
        if not workflow.patched(BUDGET_ATTEMPTS_PATCH):
            return False
        for o in outcomes:
            self._spend(inp, o)
        return self._budget is not None

    def _spend(self, inp: BatchInput, o: MemberOutcome) -> None:
        """Count an attempt that is run again (not a result: only what it spent)."""
        self._acc.spend(
            model_calls=o.model_calls,
            model_tokens=o.model_tokens,
            duration_s=o.duration_s,
            cost=o.cost,
        )
        self._check_budget(inp)

    def _check_budget(self, inp: BatchInput) -> None:
        if self._budget is None:
            self._budget = self._over_budget(inp)
            if self._budget is not None:
                self._status = "budget_exhausted"  # the ones in flight finish

    # -- helpers -------------------------------------------------------------------

    def _over_budget(self, inp: BatchInput) -> BudgetName | None:
        acc = self._acc
        return exhausted(
            inp.spec.budget,
            model_tokens=acc.model_tokens,
            model_calls=acc.model_calls,
            episode_seconds=acc.episode_seconds,
            # `max_cost` is new: no saved history's budget has it, none replays otherwise.
            cost=acc.cost.total if acc.cost else 0.0,
        )

    def _should_continue_as_new(self, started: int, children_per_run: int) -> bool:
        return started >= children_per_run or workflow.info().is_continue_as_new_suggested()

    def _upsert_attributes(self, inp: BatchInput) -> None:
        """Idempotent, and continue-as-new keeps them: set once per chain."""
        updates = [
            sa.BATCH.value_set(self._batch),
            sa.SPEC.value_set(inp.spec.name),
            sa.ENV.value_set(inp.spec.env),
        ]
        if inp.schedule:
            updates.append(sa.SCHEDULE.value_set(inp.schedule))
        workflow.upsert_search_attributes(updates)

    def _set_details(self) -> None:
        m = self._acc.summary()
        lines = [
            f"**{self._status}** · {m.count}/{self._total} done · {self._running} running"
            + (f" ({len(self._parked)} parked)" if self._parked else "")
            + f" · run {self._runs}"
        ]
        if m.mean_reward is not None:
            lines.append(f"- mean reward {m.mean_reward:.3f} over {m.rewarded}")
        if m.pass_at_k:
            ks = ", ".join(f"pass@{k} {m.pass_at_k[k]:.3f}" for k in report_ks(m.pass_at_k))
            lines.append(f"- {ks} (pass: reward ≥ {m.pass_threshold})")
        if m.terminations:
            lines.append("- " + ", ".join(f"`{k}` {n}" for k, n in m.terminations.items()))
        if m.infra_failures or m.retried:
            lines.append(
                f"- infrastructure: {m.infra_failures} failed after retries, "
                f"{m.retried} fresh episodes run again"
            )
        if m.model_calls or self._budget is not None:
            lines.append(
                f"- spent: {m.model_tokens} model tokens, {m.model_calls} model calls, "
                f"{m.episode_seconds:.1f} episode seconds"
            )
        if self._budget is not None:
            lines.append(f"- stopped: `{self._budget}` reached, no more episodes started")
        if m.groups_complete or m.groups_failed:
            lines.append(
                f"- groups: {m.groups_complete} complete, {m.groups_failed} failed, "
                f"{m.groups_zero_variance} zero-variance"
            )
        if self._errors:
            lines.append(f"- last failure: `{self._errors[-1][:300]}`")
        workflow.set_current_details("\n".join(lines))


def _provision_failed(e: BaseException) -> bool:
    """The episode's workflow failed because `provision` did, after Temporal's retries, for
    a reason other than the harness (those are outcomes): the infrastructure failed."""
    cause = e.cause if isinstance(e, ChildWorkflowError) else e
    return isinstance(cause, ActivityError) and cause.activity_type == contract.PROVISION
