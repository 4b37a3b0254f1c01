"""What both episode workflows share: the story's steps, without any handler but `progress`.

provision (or the harness's failure as the outcome) -> ... -> score -> release ->
finish (the outcome's search attributes, the details, the EpisodeResult).
`EpisodeWorkflow` drives the turns in between; `InteractiveEpisodeWorkflow` takes
them as `step` Updates. Each defines its own Updates: an interactive session must
not accept the drive's `record_turns`, nor an episode a trainer's `step`.

The score step is `workflows.scoring` (a base class of `EpisodeBase`).

Workflow code: deterministic, models only.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, is_cancelled_exception

from workflows.details import episode_details
from workflows.failures import (
    failure_message,
    is_spec_error,
    provision_failure,
)
from workflows.scoring import (  # noqa: F401 (the patch names' import path from before)
    CHAIN_SCORE_PATCH,
    NO_RESET_NO_SCORE_PATCH,
    SCORE_ENV_ERROR_PATCH,
    Scoring,
)

with workflow.unsafe.imports_passed_through():
    from episodes import contract
    from episodes import search_attributes as sa
    from episodes.types.cost import ModelUsage, episode_cost, merge_usage, usage_by_model
    from episodes.types.io import (
        EpisodeCarry,
        EpisodeInput,
        EpisodeProgress,
        EpisodeStatus,
        ProvisionInput,
        ReleaseInput,
        RestoreInput,
        RestoreResult,
        SessionRef,
    )
    from episodes.types.priority import records_usage
    from episodes.types.results import (
        Cut,
        EpisodeResult,
        ForkOrigin,
        ScoreResult,
        Termination,
        TurnRecord,
    )
    from episodes.types.tuning import DEFAULT_PROGRESS_TURNS, PROGRESS_MAX_BYTES


# Histories recorded before a restore that failed other than as an outcome (timed out,
# its retries spent) ended the episode worker_lost (the workflow failed).
RESTORE_LOST_PATCH = "restore-failure-worker-lost"
# A cancel that came while a park released the session was taken for a failed release
# (logged): the episode (or session) stayed parked until `max_parked_s`, then resumed
# and ran on. Now the cancel ends it `cancelled` at once, the session released again.
PARK_CANCEL_PATCH = "cancel-while-parking"
# A cancel that came while a restore ran (a parked episode's resume, a restart, a
# fork's replay) was taken for a failed restore: the episode ended `worker_lost` and
# scored its record. Now it ends `cancelled`, unscored.
RESTORE_CANCEL_PATCH = "cancel-while-restoring"
# The result (and a continued run's carry) holds the model usage per model, cached and
# reasoning tokens included, and the cost under the spec's `prices`: new payload fields,
# no new command, guarded all the same so a saved history replays exactly as it ran.
USAGE_PATCH = "episode-usage-and-cost"


class EpisodeBase(Scoring):
    """The state of one episode and the steps of its story (not a workflow by itself)."""

    def __init__(self) -> None:
        self._status: EpisodeStatus = "provisioning"
        # The runtime type its latest box ran on, as the provision or restore said.
        self._ran_on: str | None = None
        self._ref: SessionRef | None = None
        self._turns: list[TurnRecord] = []  # this run's; `_first_turn` came before
        self._first_turn = 0
        self._runs = 1
        self._termination: Termination | None = None
        self._cut: Cut | None = None  # a `cut` signal: why the cancel that follows came
        self._max_turns = 0
        # `on_worker_lost: restart`, counted over the whole chain (the carry keeps them).
        self._restarts = 0
        self._box_failovers = 0
        self._turns_replayed = 0
        self._divergences = 0
        self._turns_rerun = 0
        # The session's activity ran past its backstop: score the recorded turns instead.
        self._score_recorded = False
        # A session was opened (its env reset) at some point of the chain.
        self._opened = False
        # The earlier runs' model calls and tokens (the carry's).
        self._earlier_calls = 0
        self._earlier_tokens = 0
        self._earlier_usage: dict[str, ModelUsage] = {}
        # It could not start for a reason in its configuration (a spec error).
        self._config_error = False
        self._park = False  # a `park` signal asks for the next turn (or step) boundary

    @property
    def _turns_done(self) -> int:
        return self._first_turn + len(self._turns)

    def _adopt(self, carry: EpisodeCarry) -> None:
        """A continued run: the live session and the counters of the runs before."""
        self._ref, self._first_turn, self._runs = carry.session, carry.turns_done, carry.runs
        self._ran_on = carry.session.runtime
        self._opened = True
        self._restarts, self._turns_replayed = carry.restarts, carry.turns_replayed
        self._box_failovers = carry.box_failovers
        self._divergences, self._turns_rerun = carry.replay_divergences, carry.turns_rerun
        self._earlier_calls, self._earlier_tokens = carry.model_calls, carry.model_tokens
        self._earlier_usage = dict(carry.usage)

    def _carry(self, started: datetime) -> dict:
        assert self._ref is not None
        return {
            "session": self._ref,
            "turns_done": self._turns_done,
            "started_at": started,
            "runs": self._runs + 1,
            "restarts": self._restarts,
            "box_failovers": self._box_failovers,
            "turns_replayed": self._turns_replayed,
            "replay_divergences": self._divergences,
            "turns_rerun": self._turns_rerun,
            **self._model_usage(),
            **({"usage": self._usage()} if workflow.patched(USAGE_PATCH) else {}),
        }

    def _usage(self) -> dict[str, ModelUsage]:
        """The chain's model usage per model so far (`episodes.types.cost`)."""
        return merge_usage(
            self._earlier_usage, usage_by_model(e for t in self._turns for e in t.events)
        )

    def _model_usage(self) -> dict[str, int]:
        """The chain's model calls and tokens so far (batch budgets count them)."""
        tokens, calls = records_usage(self._turns)
        return {
            "model_calls": self._earlier_calls + calls,
            "model_tokens": self._earlier_tokens + tokens,
        }

    # The SDK collects handlers over the class hierarchy, so each subclass answers it.
    @workflow.query(name=contract.PROGRESS)
    def progress(self, since: int | None = None, last: int | None = None) -> EpisodeProgress:
        """Where the episode is, with its latest turns: those from index `since` on (of the
        whole chain), at most `last` of them (default 100), and never more than 2 MiB of
        them (at least one): a run holds up to 1,000 turns of up to 1 MiB each, and a
        query answer must fit gRPC's 4 MB."""
        turns = self._turns
        if since is not None:
            turns = turns[max(0, since - self._first_turn) :]
        limit = DEFAULT_PROGRESS_TURNS if last is None else max(0, last)
        turns = turns[len(turns) - limit :] if limit < len(turns) else turns
        budget, keep = PROGRESS_MAX_BYTES, 0
        for t in reversed(turns):
            budget -= len(t.model_dump_json())
            if budget < 0 and keep:
                break
            keep += 1
        turns = turns[len(turns) - keep :] if keep else []
        return EpisodeProgress(
            status=self._status,
            turns_done=self._turns_done,
            max_turns=self._max_turns,
            termination=self._termination,
            session=self._ref,
            first_message=self._ref.first_message if self._ref else None,
            turns=turns,
            first_turn=turns[0].turn if turns else self._turns_done,
            runs=self._runs,
            restarts=self._restarts,
            park_asked=self._park,
        )

    # -- the story, step by step -------------------------------------------------------

    async def _provision_or_outcome(self, inp: EpisodeInput) -> str | None:
        """Provision the session (`_ref`); a harness that fails to start is the episode's
        outcome (`_termination`, and the error returned), not a workflow failure."""
        try:
            self._ref = await self._provision(inp)
            self._ran_on = self._ref.runtime
            self._opened = True
        except ActivityError as e:
            kind = provision_failure(e)
            if kind is None:
                raise
            self._termination = kind
            self._config_error = is_spec_error(e)
            return failure_message(e)
        return None

    async def _provision(self, inp: EpisodeInput) -> SessionRef:
        info = workflow.info()
        h = inp.spec.harness
        return await workflow.execute_activity(
            contract.provision,
            ProvisionInput(
                spec=inp.spec,
                task=inp.task,
                sample=inp.sample,
                workflow_id=info.workflow_id,
                run_id=info.run_id,
                idle_timeout_s=self._idle_timeout_s(inp),
            ),
            # Box start (a container, a VM) plus the harness's own ready timeout.
            start_to_close_timeout=timedelta(seconds=h.ready_timeout_s + 300),
            # The provision beats while it works: a worker lost mid-provision is noticed
            # after this and the provision retried elsewhere. (Activity options are not
            # part of replay's command check: older histories replay unchanged.)
            heartbeat_timeout=timedelta(seconds=inp.spec.worker_lost_timeout_s),
            retry_policy=RetryPolicy(
                maximum_attempts=3,
                initial_interval=timedelta(seconds=1),
                non_retryable_error_types=list(contract.NON_RETRYABLE_PROVISION),
            ),
            summary=f"provision {inp.task.id}",
        )

    def _idle_timeout_s(self, inp: EpisodeInput) -> float | None:
        """How long the session may wait untouched between turns for its workflow (an
        interactive session's idle timeout); None: never longer than a turn. Activity
        input only: replay does not compare it."""
        return None

    def _may_fail_over(self, inp: EpisodeInput) -> bool:
        return self._box_failovers < inp.spec.max_box_failovers

    def _may_restart(self, inp: EpisodeInput) -> bool:
        return inp.spec.on_worker_lost == "restart" and self._restarts < inp.spec.max_restarts

    async def _fork_open(self, inp: EpisodeInput, fork: ForkOrigin) -> str | None:
        """A fork's branch: a session that replays the parent's first `fork.at_turn`
        turns exactly (they stay in the parent's history: this one starts at that turn),
        or the error of one that could not open, as `_provision_or_outcome`'s."""
        self._first_turn = fork.at_turn
        error = await self._restore(inp, None, source=fork.workflow_id)
        self._opened = self._ref is not None
        return error

    async def _restore(
        self,
        inp: EpisodeInput,
        lost_at_turn: int | None,
        *,
        source: str | None = None,
        count: bool = True,
        failover: bool = False,
    ) -> str | None:
        """`on_worker_lost: restart`: a new session on any live worker with the recorded
        turns replayed (`_ref`); None, or the error of a restore that failed as an outcome
        (`_termination` set, `_ref` None). Turns the lost worker finished but had not
        recorded yet (`lost_at_turn`, its last heartbeat) are run again by the next drive.
        `source`: a fork's parent, whose turns are replayed (no restart is counted);
        `count` False: a parked episode's resume (not a restart either); `failover`: a
        box that died under the episode (counted as a box failover, not a restart)."""
        info, spec, h = workflow.info(), inp.spec, inp.spec.harness
        if failover:
            self._box_failovers += 1
            count = False
        elif source is None and count:
            self._restarts += 1
            self._turns_rerun += max(0, (lost_at_turn or 0) - self._turns_done)
        self._status, self._ref = "restoring", None
        self._set_details()
        per_turn = spec.turn_timeout_s + 2 * h.stop_timeout_s
        try:
            restored: RestoreResult = await workflow.execute_activity(
                contract.restore,
                RestoreInput(
                    spec=spec,
                    task=inp.task,
                    sample=inp.sample,
                    workflow_id=info.workflow_id,
                    run_id=info.run_id,
                    turns=self._turns_done,
                    restart=max(1, self._restarts),
                    lost="box" if failover else "worker",
                    idle_timeout_s=self._idle_timeout_s(inp),
                    source_workflow_id=source,
                ),
                start_to_close_timeout=timedelta(
                    seconds=h.ready_timeout_s + 300 + self._turns_done * per_turn
                ),
                heartbeat_timeout=timedelta(seconds=max(spec.worker_lost_timeout_s, 10)),
                retry_policy=RetryPolicy(
                    maximum_attempts=3,
                    initial_interval=timedelta(seconds=1),
                    non_retryable_error_types=list(
                        (*contract.NON_RETRYABLE_PROVISION, contract.ENV_ERROR)
                    ),
                ),
                summary=(
                    f"replay {self._turns_done} turns of {source}"
                    if source
                    else f"restore {self._turns_done} turns (restart {self._restarts})"
                    if count
                    else f"restore {self._turns_done} turns (box failover {self._box_failovers})"
                    if failover
                    else f"resume: replay {self._turns_done} turns"
                ),
            )
        except ActivityError as e:
            if is_cancelled_exception(e) and workflow.patched(RESTORE_CANCEL_PATCH):
                # The run ends `cancelled`; a session the restore still brings up is
                # stopped by its worker's reaper once the workflow has closed.
                raise
            kind = provision_failure(e)
            if kind is None:
                if not workflow.patched(RESTORE_LOST_PATCH):
                    raise
                # Any other failure (its retries spent, timed out, no worker took it):
                # no session could be brought back, as when no restart is allowed.
                kind = "worker_lost"
            self._termination = kind
            self._config_error = is_spec_error(e)
            what = (
                f"fork of {source}"
                if source
                else f"restart {self._restarts}"
                if count
                else f"box failover {self._box_failovers}"
                if failover
                else "resume"
            )
            return f"{what} failed: {failure_message(e)}"
        self._ref = restored.session
        self._ran_on = restored.session.runtime or self._ran_on
        self._turns_replayed += restored.turns_replayed
        self._divergences += restored.divergences
        self._status = "running"
        self._set_details()
        return None

    async def _release(self, ref: SessionRef, *, parking: bool = False) -> None:
        """Always runs (also after cancellation); a failed release is logged, not fatal.
        `parking`: a park's release, which a cancel of the workflow cancels: that cancel
        is raised (the caller ends the episode `cancelled` and releases again), not
        absorbed as a failed release."""
        try:
            await workflow.execute_activity(
                contract.release,
                ReleaseInput(session_id=ref.session_id),
                task_queue=ref.task_queue,
                schedule_to_start_timeout=timedelta(seconds=30),
                start_to_close_timeout=timedelta(seconds=120),
                retry_policy=RetryPolicy(maximum_attempts=3),
                summary="release",
            )
        except ActivityError as e:
            if parking and is_cancelled_exception(e) and workflow.patched(PARK_CANCEL_PATCH):
                raise
            # The worker's reaper stops sessions whose workflow has closed.
            workflow.logger.warning("release of %s failed: %s", ref.session_id, e)

    def _finish(
        self, inp: EpisodeInput, started: datetime, error: str | None, score: ScoreResult
    ) -> EpisodeResult:
        """The episode is over: its outcome in the search attributes and details, and the
        result (no termination yet means it was cancelled before it had one)."""
        self._status = "done"
        termination = self._termination or "cancelled"
        workflow.upsert_search_attributes(
            [
                sa.TERMINATION.value_set(termination),
                sa.TURNS.value_set(self._turns_done),
                *([sa.REWARD.value_set(score.reward)] if score.reward is not None else []),
            ]
        )
        self._set_details()
        duration_s = (workflow.now() - started).total_seconds()
        calls = self._model_usage()
        spent: dict = {}
        if workflow.patched(USAGE_PATCH):
            usage = self._usage()
            prices = inp.spec.prices
            # The runtime the box ran on (a spillover one, maybe); activity results only,
            # so replay is unchanged.
            runtime = self._runtime(inp)
            spent = {
                "usage": usage,
                "cost": episode_cost(usage, duration_s, runtime, prices) if prices else None,
            }
        return EpisodeResult(
            workflow_id=workflow.info().workflow_id,
            task_id=inp.task.id,
            sample=inp.sample,
            env=inp.spec.env,
            spec_name=inp.spec.name,
            termination=termination,
            error=error,
            turns=self._turns_done,
            reward=score.reward,
            score_details=score.details,
            duration_s=duration_s,
            pool_hit=self._ref.pool_hit if self._ref else None,
            runtime=self._ran_on,
            restarts=self._restarts,
            turns_replayed=self._turns_replayed,
            replay_divergences=self._divergences,
            turns_rerun=self._turns_rerun,
            box_failovers=self._box_failovers,
            model_calls=calls["model_calls"],
            model_tokens=calls["model_tokens"],
            config_error=self._config_error,
            forked_from=inp.fork,
            cut=self._cut if termination == "cancelled" else None,
            **spent,
        )

    def _runtime(self, inp: EpisodeInput) -> str:
        """The type of the runtime the session's box runs on: as its provision said, or
        the spec's first (a session from before provisions said it)."""
        return self._ran_on or inp.spec.harness.runtime.type

    def _set_details(self) -> None:
        workflow.set_current_details(
            episode_details(
                self._status, self._max_turns, self._turns, self._termination, self._turns_done
            )
        )
