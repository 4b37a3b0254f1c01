"""The trainer's client: start episodes, run batches, stream results as they finish.

    client = await EpisodesClient.connect("127.0.0.1:7233")
    async for result in client.run_batch("examples/guess-number.yaml"):
        print(result.task_id, result.reward)

Workflow ids are deterministic (`<batch>.<task id>.s<sample>`), so a trainer that
restarts re-attaches to running or finished episodes instead of duplicating them.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any, Literal, overload

from temporalio.client import Client, WorkflowHandle
from temporalio.converter import DataConverter
from typing_extensions import Unpack

from episodes.client.batch.dispatch import await_result
from episodes.client.batch.options import BatchKeywords, BatchOptions, batch_id_arg
from episodes.client.batch.priority import with_priority
from episodes.client.batch.stream import stream_results
from episodes.client.group.execution import run_group_execution
from episodes.client.group.options import groups_spec
from episodes.client.group.receipts import ReceiptsStatus, receipts_status
from episodes.client.group.staleness import ON_STALE
from episodes.client.group.stream import Group, stream_groups
from episodes.client.histories.replaying import ReplayMethods
from episodes.client.interactive import InteractiveSession, attach_session, open_session
from episodes.client.starting import start_episode
from episodes.errors import EpisodesError
from episodes.specfile import load_spec
from episodes.types.model import UpstreamSpec
from episodes.types.priority import BudgetName
from episodes.types.results import EpisodeResult, Task, Transcript
from episodes.types.spec import EpisodeSpec
from episodes.types.tuning import DEFAULT_IDLE_TIMEOUT_S, DEFAULT_TASK_QUEUE, DEFAULT_TURNS_PER_RUN


class EpisodesClient(ReplayMethods):
    def __init__(self, client: Client, *, task_queue: str = DEFAULT_TASK_QUEUE) -> None:
        self.client = client
        self.task_queue = task_queue
        # The policy version episodes are dispatched at (`run_batch`); None: the spec's.
        self.policy_version: int | None = None
        # The fleet episodes are dispatched to (`run_batch`); None: the spec's own
        # `model.base_url` / `model.upstreams` (see docs/tools-and-models.md).
        self.upstreams: list[UpstreamSpec] | None = None
        # The budget (`spec.budget`) the last `run_batch` stream reached, if any.
        self.budget_exhausted: BudgetName | None = None
        # Groups the last groups stream did not yield (`skip_zero_variance`).
        self.zero_variance_skipped = 0
        # Groups the last groups stream dropped at `group_timeout_s` (`group_on_timeout:
        # drop`), not yielded either.
        self.groups_dropped = 0
        # Episodes the last stream saw end, yielded or not (a skipped or dropped
        # group's members too; stragglers cut are not counted).
        self.episodes_ran = 0

    @classmethod
    async def connect(
        cls,
        address: str | None = None,
        *,
        namespace: str | None = None,
        api_key: str | None = None,
        tls: bool | None = None,
        profile: str | None = None,
        config_file: str | Path | None = None,
        task_queue: str | None = None,
        data_converter: DataConverter | None = None,
        timeout_s: float = 10.0,
    ) -> EpisodesClient:
        """Connect as the `episodes` command does: arguments > `TEMPORAL_*` /
        `EPISODES_*` environment variables > the config file's profile > defaults
        (127.0.0.1:7233, namespace `default`, task queue `episodes`). An API key or TLS
        from any of those is used as given. `data_converter` None: the configured one
        (payload encryption and external storage, docs/operations.md)."""
        from episodes.client.config import TemporalFlags, load_config
        from episodes.client.connect import connect_config

        config = load_config(
            TemporalFlags(address=address, namespace=namespace, api_key=api_key, tls=tls),
            {"task_queue": task_queue},
            config=Path(config_file) if config_file is not None else None,
            profile=profile,
        )
        client = await connect_config(config, timeout_s=timeout_s, data_converter=data_converter)
        return cls(client, task_queue=config.settings.task_queue)

    async def start_episode(
        self,
        spec: EpisodeSpec,
        task: Task,
        sample: int = 0,
        *,
        batch_id: str | None = None,
        attempt: int = 0,
        batch: str | None = None,
    ) -> WorkflowHandle[object, EpisodeResult]:
        """Start one episode, or attach to the one already running/finished under its id.
        `batch_id`: its batch (default: the spec's name; `batch=`: deprecated spelling).
        `attempt` > 0: the fresh episode a batch runs after an infrastructure failure."""
        batch_id = batch_id_arg(batch_id, batch, "start_episode")
        handle, _ = await self._start_episode(spec, task, sample, batch=batch_id, attempt=attempt)
        return handle

    async def _start_episode(
        self, spec: EpisodeSpec, task: Task, sample: int, *, batch: str | None, attempt: int
    ) -> tuple[WorkflowHandle[object, EpisodeResult], bool]:
        """`start_episode`, and whether the episode had already closed (it attached to a
        finished one: a closed id is never reused, `episodes.client.starting`)."""
        return await start_episode(
            self.client, self.task_queue, spec, task, sample, batch=batch, attempt=attempt
        )

    async def run_episode(
        self,
        spec: EpisodeSpec,
        task: Task,
        sample: int = 0,
        *,
        batch_id: str | None = None,
        batch: str | None = None,
    ) -> EpisodeResult:
        batch_id = batch_id_arg(batch_id, batch, "run_episode")
        handle, _ = await self._start_episode(spec, task, sample, batch=batch_id, attempt=0)
        return await await_result(handle)

    async def transcript(self, workflow_id: str) -> Transcript:
        """A finished (or running) episode's transcript from its history, every run of
        it: `transcript.model_calls()` / `tool_calls()` give the calls in order."""
        from episodes.client.histories.transcript import fetch_transcript

        return await fetch_transcript(self.client, workflow_id)

    async def ack(self, group: Group) -> None:
        """`group.ack()`: record on the server that the trainer consumed `group` (a
        restarted trainer running the batch again never gets it again)."""
        await group.ack()

    async def batch_status(self, batch_id: str) -> ReceiptsStatus:
        """How many of the batch's groups the trainer acknowledged, how many are
        outstanding, how many still run (`episodes batch status`)."""
        return await receipts_status(self.client, batch_id)

    async def open_session(
        self,
        spec: EpisodeSpec,
        task: Task,
        sample: int = 0,
        *,
        batch_id: str | None = None,
        idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
        workflow_id: str | None = None,
        turns_per_run: int = DEFAULT_TURNS_PER_RUN,
        batch: str | None = None,
    ) -> InteractiveSession:
        """An interactive session: the trainer sends each turn (see `episodes.client.interactive`)."""
        return await open_session(
            self.client,
            self.task_queue,
            spec,
            task,
            sample,
            batch=batch_id_arg(batch_id, batch, "open_session"),
            idle_timeout_s=idle_timeout_s,
            workflow_id=workflow_id,
            turns_per_run=turns_per_run,
        )

    async def attach_session(self, workflow_id: str) -> InteractiveSession | None:
        """Re-attach to a running interactive session by id, starting none (None: no such
        workflow; see `episodes.client.interactive.attach_session`)."""
        return await attach_session(self.client, workflow_id)

    @overload
    def run_batch(
        self,
        spec: EpisodeSpec | str | Path,
        *,
        options: None = None,
        groups: Literal[False] = False,
        **kwargs: Unpack[BatchKeywords],
    ) -> AsyncGenerator[EpisodeResult, None]: ...

    @overload
    def run_batch(
        self,
        spec: EpisodeSpec | str | Path,
        *,
        options: None = None,
        groups: Literal[True],
        **kwargs: Unpack[BatchKeywords],
    ) -> AsyncGenerator[Group, None]: ...

    @overload
    def run_batch(
        self,
        spec: EpisodeSpec | str | Path,
        *,
        options: BatchOptions,
        groups: bool = ...,
        **kwargs: Unpack[BatchKeywords],
    ) -> AsyncGenerator[EpisodeResult, None] | AsyncGenerator[Group, None]: ...

    def run_batch(
        self,
        spec: EpisodeSpec | str | Path,
        *,
        options: BatchOptions | None = None,
        **kwargs: Any,
    ) -> AsyncGenerator[EpisodeResult, None] | AsyncGenerator[Group, None]:
        """Every task x sample, at most `concurrency` in flight, yielded as each finishes.
        The options are `BatchOptions`' fields, as keyword arguments or as
        `options=BatchOptions(...)` (keyword arguments beside it replace its fields).

        `batch_id`: the batch's id, in every workflow id (default: the spec's name; the
        same id again re-attaches; `batch=` is its deprecated spelling).

        An episode whose workflow failed is yielded as a `workflow_failed` result (its
        `error` says why); the stream goes on. One that ended for an infrastructure
        reason runs again as a fresh episode, up to `batch_retries`. Closing or
        cancelling the iterator cancels the episodes it still waits for; running the
        batch again runs those as fresh attempts (`<id>.r<n>`) and re-attaches to the
        ones that finished.

        `groups`: yield each task's samples as one `Group` once all ended, members
        re-run up to `group_retries` (`episodes.client.group.stream`). `policy_version`: set
        `self.policy_version` now; every episode is dispatched at `self.policy_version`
        as it is then (`model.policy_version`, recorded on each model call), so a
        trainer moves it on by setting the attribute. `max_staleness` (groups only):
        how far a running group may trail `self.policy_version`; `on_stale="keep"`
        (default) starts no new group and hands out no complete one while a running
        group trails by more, `"requeue"` cancels it and dispatches it again at the
        current version (`episodes.client.group.staleness`). `group.ack()` (or
        `self.ack(group)`) records that the trainer used a group: the same batch id run
        again never yields it again (`episodes.client.group.receipts`).

        `priority` (1 first .. 5), `fairness_key`, `fairness_weight` and `budget`
        replace the spec's (`episodes.client.batch.priority.with_priority`): every episode and its
        activities carry the priority and fairness. Past a budget no more episodes
        start (with groups: no more groups, those dispatched finish whole), the stream
        ends once those in flight have, and `self.budget_exhausted` names the budget.

        `oversample`, `skip_zero_variance` (groups only; `episodes.client.group.stream`)
        replace the spec's: stragglers cut, zero-variance groups skipped and counted.

        `execution="group"` (opt-in; None: the spec's): a task's samples run as one
        workflow, members addressed `<batch>.<task>.g.s<n>` (`episodes.client.group.execution`).
        """
        o = BatchOptions.of(options, kwargs, where="run_batch")
        if not isinstance(spec, EpisodeSpec):
            spec = load_spec(spec)
        spec = with_priority(
            spec,
            priority=o.priority,
            fairness_key=o.fairness_key,
            fairness_weight=o.fairness_weight,
            budget=o.budget,
        )
        if o.policy_version is not None:
            self.policy_version = o.policy_version
        limit = o.concurrency or spec.concurrency
        self.budget_exhausted = None
        spec = groups_spec(spec, o.groups, o.oversample, o.skip_zero_variance)
        batch, max_staleness = o.batch_id, o.max_staleness
        on_stale = o.on_stale or "keep"
        if on_stale not in ON_STALE:
            raise EpisodesError(f"on_stale={on_stale!r}: give one of {', '.join(ON_STALE)}")
        if (o.execution or spec.execution) == "group":
            return run_group_execution(
                self, spec, batch, limit, max_staleness, groups=o.groups, on_stale=on_stale
            )
        if o.groups:
            if max_staleness is not None and self.policy_version is None:
                raise EpisodesError(
                    "max_staleness needs a policy version: pass policy_version= "
                    "or set client.policy_version"
                )
            return stream_groups(
                self,
                spec,
                batch=batch,
                limit=limit,
                max_staleness=max_staleness,
                on_stale=on_stale,
            )
        if max_staleness is not None:
            raise EpisodesError("max_staleness applies to groups: pass groups=True")
        return stream_results(self, spec, batch=batch, limit=limit)


# `episodes.connect()`: an `EpisodesClient` configured as the CLI is, the same function
# as `EpisodesClient.connect` (one signature, not a copy of it).
connect = EpisodesClient.connect
