"""The trainer's client: start episodes, run batches, stream results as they finish.

    client = await EpisodesClient.connect("127.0.0.1:7233")
    async for result in client.run_batch("examples/guess-number.yaml"):
        print(result.task_id, result.reward)

Workflow ids are deterministic (`<batch>.<task id>.s<sample>`), so a trainer that
restarts re-attaches to running or finished episodes instead of duplicating them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator
from pathlib import Path

from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.converter import DataConverter
from temporalio.exceptions import ActivityError, FailureError, WorkflowAlreadyStartedError

from episodes import contract
from episodes.client.interactive import InteractiveSession, open_session
from episodes.errors import EpisodeFailed
from episodes.search_attributes import episode_search_attributes
from episodes.specfile import load_spec
from episodes.types.io import EpisodeInput
from episodes.types.results import WORKFLOW_FAILED, EpisodeResult, Task, Transcript
from episodes.types.spec import EpisodeSpec
from episodes.types.tuning import DEFAULT_IDLE_TIMEOUT_S, DEFAULT_TASK_QUEUE, DEFAULT_TURNS_PER_RUN


class EpisodesClient:
    def __init__(self, client: Client, *, task_queue: str = DEFAULT_TASK_QUEUE) -> None:
        self.client = client
        self.task_queue = task_queue

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
        batch: str | None = None,
        attempt: int = 0,
    ) -> WorkflowHandle[object, EpisodeResult]:
        """Start one episode, or attach to the one already running/finished under its id.
        `attempt` > 0: the fresh episode a batch runs after an infrastructure failure."""
        handle, _ = await self._start_episode(spec, task, sample, batch=batch, attempt=attempt)
        return handle

    async def _start_episode(
        self, spec: EpisodeSpec, task: Task, sample: int, *, batch: str | None, attempt: int
    ) -> tuple[WorkflowHandle[object, EpisodeResult], bool]:
        """`start_episode`, and whether the episode had already closed (it attached to a
        finished one: a closed id is never reused, see the policy below)."""
        batch = batch or spec.name
        wid = contract.retry_id(contract.episode_id(batch, task.id, sample), attempt)
        try:
            handle = await self.client.start_workflow(
                contract.EPISODE_WORKFLOW,
                EpisodeInput(
                    spec=contract.single_task_spec(spec, task),
                    task=task,
                    sample=sample,
                    batch=batch,
                ),
                id=wid,
                task_queue=self.task_queue,
                result_type=EpisodeResult,
                # A finished episode is never run twice; a failed workflow may be re-run.
                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                # With a worker on this queue in the same process (tests, benchmarks, a
                # trainer hosting one), the first workflow task comes back with the start.
                request_eager_start=True,
                search_attributes=episode_search_attributes(spec, task, batch),
                static_summary=f"{spec.env} · task {task.id} · sample {sample}",
                static_details=(
                    f"**spec** `{spec.name}` · **batch** `{batch}`\n\n"
                    f"harness: `{' '.join(spec.harness.command)}` "
                    f"on `{spec.harness.runtime.type}` · max turns {spec.max_turns}"
                ),
            )
        except WorkflowAlreadyStartedError:
            return self.client.get_workflow_handle(wid, result_type=EpisodeResult), True
        return handle, False

    async def run_episode(
        self, spec: EpisodeSpec, task: Task, sample: int = 0, *, batch: str | None = None
    ) -> EpisodeResult:
        handle = await self.start_episode(spec, task, sample, batch=batch)
        return await _result(handle)

    async def transcript(self, workflow_id: str) -> Transcript:
        """A finished (or running) episode's transcript from its history, every run of
        it: `transcript.model_calls()` / `tool_calls()` give the calls in order."""
        from episodes.client.history import fetch_transcript

        return await fetch_transcript(self.client, workflow_id)

    async def open_session(
        self,
        spec: EpisodeSpec,
        task: Task,
        sample: int = 0,
        *,
        batch: str | None = None,
        idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
        workflow_id: str | None = None,
        turns_per_run: int = DEFAULT_TURNS_PER_RUN,
    ) -> InteractiveSession:
        """An interactive session: the trainer sends each turn (see `episodes.client.interactive`)."""
        return await open_session(
            self.client,
            self.task_queue,
            spec,
            task,
            sample,
            batch=batch,
            idle_timeout_s=idle_timeout_s,
            workflow_id=workflow_id,
            turns_per_run=turns_per_run,
        )

    async def run_batch(
        self,
        spec: EpisodeSpec | str | Path,
        *,
        concurrency: int | None = None,
        batch: str | None = None,
    ) -> AsyncGenerator[EpisodeResult, None]:
        """Every task x sample, at most `concurrency` in flight, yielded as each finishes.

        An episode whose workflow failed is yielded as a `workflow_failed` result (its
        `error` says why); the stream goes on. Closing or cancelling the iterator cancels
        the episodes it still waits for; running the batch again runs those as fresh
        attempts (`<id>.r<n>`) and re-attaches to the ones that finished.
        """
        if not isinstance(spec, EpisodeSpec):
            spec = load_spec(spec)
        work = [(t, s) for t in spec.load_tasks() for s in range(spec.samples)]
        limit = concurrency or spec.concurrency
        pending: set[asyncio.Task[EpisodeResult]] = set()

        async def one(task: Task, sample: int, box: dict) -> EpisodeResult:
            began = time.monotonic()
            attempt = retries = 0
            while True:
                box["handle"], closed = await self._start_episode(
                    spec, task, sample, batch=batch, attempt=attempt
                )
                attempt += 1
                try:
                    result = await _result(box["handle"])
                except EpisodeFailed as e:
                    # An infrastructure failure (not the agent's) runs again as a fresh
                    # episode; any other is this episode's result, not the batch's end.
                    if e.provision_failed and retries < spec.batch_retries:
                        retries += 1
                        continue
                    return _failed_result(spec, task, sample, e, time.monotonic() - began)
                if closed and result.termination == "cancelled":
                    # Cancelled when an earlier run_batch was left (Ctrl-C, an exception
                    # in the trainer's loop): its id is closed for good, so run it as the
                    # next attempt. Cancelled while this run waits: that is its result.
                    continue
                if result.termination in contract.INFRA_TERMINATIONS and (
                    retries < spec.batch_retries
                ):
                    retries += 1
                    continue
                return result

        boxes: dict[asyncio.Task[EpisodeResult], dict] = {}
        queue = iter(work)
        try:
            while True:
                while len(pending) < limit:
                    nxt = next(queue, None)
                    if nxt is None:
                        break
                    box: dict = {}
                    t = asyncio.create_task(one(*nxt, box))
                    boxes[t] = box
                    pending.add(t)
                if not pending:
                    return
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for t in done:
                    boxes.pop(t, None)
                    yield t.result()
        finally:
            for t in pending:
                t.cancel()
                handle = boxes.get(t, {}).get("handle")
                if handle is not None:
                    with contextlib.suppress(Exception):
                        await handle.cancel()


async def _result(handle: WorkflowHandle) -> EpisodeResult:
    try:
        return await handle.result()
    except WorkflowFailureError as e:
        raise _failed(handle.id, e) from None


def _failed(workflow_id: str, cause: BaseException) -> EpisodeFailed:
    detail = cause.cause if isinstance(cause, WorkflowFailureError) else cause
    # `provision` failed after Temporal's retries for a non-harness reason.
    provision_failed = (
        isinstance(detail, ActivityError) and detail.activity_type == contract.PROVISION
    )
    root = detail
    while isinstance(root, FailureError) and root.cause is not None:
        root = root.cause  # "Activity task failed" says nothing: the innermost does
    message = str(detail) if root is detail else f"{detail}: {root}"
    return EpisodeFailed(workflow_id, message, provision_failed=provision_failed)


def _failed_result(
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
        error=str(e),
        turns=0,
        duration_s=duration_s,
    )


async def connect(
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
    """`episodes.connect()`: an `EpisodesClient` configured as the CLI is (see
    `EpisodesClient.connect`)."""
    return await EpisodesClient.connect(
        address,
        namespace=namespace,
        api_key=api_key,
        tls=tls,
        profile=profile,
        config_file=config_file,
        task_queue=task_queue,
        data_converter=data_converter,
        timeout_s=timeout_s,
    )
