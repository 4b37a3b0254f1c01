"""Batches run by the server: start an EvalBatchWorkflow, watch it, read its episodes.

    handle = await start_batch(client, load_spec("examples/script.yaml"), task_queue="episodes")
    progress = await client.get_workflow_handle(handle.id).query("progress")
    result = await handle.result()          # BatchResult with the final BatchMetrics

The batch workflow id is `batch.<batch id>` (default batch id: the spec name); starting
it again attaches to the running or finished batch instead of running it twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from temporalio.client import Client, WorkflowExecution, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

from episodes import contract
from episodes import search_attributes as sa
from episodes.client.batch.options import batch_id_arg
from episodes.errors import EpisodesError
from episodes.evals.manifest import MEMO_KEY, manifest_of
from episodes.search_attributes import batch_search_attributes, task_priority
from episodes.types.attempts import final_attempts
from episodes.types.io import BatchInput, BatchProgress, BatchResult
from episodes.types.results import EpisodeResult
from episodes.types.spec import EpisodeSpec
from episodes.types.tuning import MAX_INPUT_BYTES


def batch_input(
    spec: EpisodeSpec,
    *,
    batch_id: str | None = None,
    schedule: str | None = None,
    concurrency: int | None = None,
    pass_threshold: float = 1.0,
    batch: str | None = None,
) -> BatchInput:
    """The workflow input, with the dataset read now (a workflow cannot read files).
    `batch_id`: default the spec's name (`batch=`: its deprecated spelling)."""
    if spec.oversample:
        raise EpisodesError(
            f"spec {spec.name!r}: oversample {spec.oversample} cuts stragglers in groups the "
            "client streams; a batch workflow runs every member (drop --on-server, or "
            "use run_batch(groups=True))"
        )
    tasks = spec.load_tasks()
    inp = BatchInput(
        spec=spec.model_copy(update={"tasks": tasks, "dataset": None, "harbor": None}),
        batch=batch_id_arg(batch_id, batch, "batch_input"),
        schedule=schedule,
        concurrency=concurrency,
        pass_threshold=pass_threshold,
    )
    size = len(inp.model_dump_json())
    if size > MAX_INPUT_BYTES:
        raise EpisodesError(
            f"spec {spec.name!r}: its {len(tasks)} tasks make a {size / 1e6:.1f} MB batch input; "
            f"a batch carries them in one Temporal payload (at most {MAX_INPUT_BYTES / 1e6:.1f} "
            "MB here). Keep task data small (paths or URLs) or split the dataset."
        )
    return inp


def total_episodes(inp: BatchInput) -> int:
    return len(inp.spec.tasks or []) * inp.spec.samples


async def start_batch(
    client: Client, inp: BatchInput, *, task_queue: str
) -> WorkflowHandle[Any, BatchResult]:
    """Start the batch, or attach to the one already running/finished under its id."""
    batch = inp.batch or inp.spec.name
    inp = inp.model_copy(update={"batch": batch})
    wid = contract.batch_workflow_id(batch)
    try:
        return await client.start_workflow(
            contract.BATCH_WORKFLOW,
            inp,
            id=wid,
            task_queue=task_queue,
            result_type=BatchResult,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            search_attributes=batch_search_attributes(inp.spec, batch, inp.schedule),
            # What the batch pinned, for `episodes compare` (no workflow code reads it).
            memo={MEMO_KEY: manifest_of(inp.spec)},
            # Handed down by the server to its episodes and their activities.
            priority=task_priority(inp.spec),
            static_summary=f"batch {batch} · {inp.spec.name} · {total_episodes(inp)} episodes",
        )
    except WorkflowAlreadyStartedError:
        return client.get_workflow_handle(wid, result_type=BatchResult)


async def query_progress(client: Client, workflow_id: str) -> BatchProgress | None:
    """The latest run's progress; None while no worker answers (e.g. it is starting)."""
    # A handle without a run id follows continue-as-new to the newest run.
    handle = client.get_workflow_handle(workflow_id)
    try:
        return await handle.query(
            contract.PROGRESS, result_type=BatchProgress, rpc_timeout=timedelta(seconds=5)
        )
    except Exception:  # RPCError, WorkflowQueryFailedError: try again on the next tick
        return None


async def wait_batch(
    client: Client,
    handle: WorkflowHandle[Any, BatchResult],
    *,
    on_progress: Callable[[BatchProgress], None] | None = None,
    interval_s: float = 0.5,
) -> BatchResult:
    """The batch's result, calling `on_progress` with each progress query on the way."""
    from temporalio.client import WorkflowFailureError

    # Follows continue-as-new from the first run to the result.
    waiting = asyncio.ensure_future(handle.result(follow_runs=True))
    try:
        while not waiting.done():
            if on_progress is not None:
                progress = await query_progress(client, handle.id)
                if progress is not None:
                    on_progress(progress)
            await asyncio.wait({waiting}, timeout=interval_s)
        return waiting.result()
    except WorkflowFailureError as e:
        raise EpisodesError(f"batch {handle.id} failed: {e.cause}") from None
    finally:
        waiting.cancel()


def episodes_query(batch: str) -> str:
    """The visibility query of a batch's episodes."""
    # A quote would end the string in the visibility query (and let a batch id add terms).
    if "'" in batch or "\\" in batch:
        raise EpisodesError(f"batch id {batch!r}: quotes and backslashes are not allowed")
    return f"{sa.BATCH.name} = '{batch}' AND WorkflowType = '{contract.EPISODE_WORKFLOW}'"


async def final_episodes(client: Client, batch: str) -> list[WorkflowExecution]:
    """A batch's episodes (found by EpisodeBatch), sorted by id: the final attempt of
    each (task, sample) (`episodes.types.attempts`), never an attempt a re-run replaced.
    Those that finished or started a moment ago may not be visible yet."""
    runs = [wf async for wf in client.list_workflows(episodes_query(batch))]
    final = final_attempts(runs, workflow_id=lambda wf: wf.id, started=lambda wf: wf.start_time)
    return sorted(final, key=lambda wf: wf.id)


async def episode_ids(client: Client, batch: str) -> list[str]:
    """The workflow ids of a batch's episodes: the final attempt of each (task, sample)."""
    return [wf.id for wf in await final_episodes(client, batch)]


async def episode_results(
    client: Client, batch: str, *, expected: int, concurrency: int = 32, wait_s: float = 30.0
) -> list[EpisodeResult]:
    """Every finished episode of a batch (found by EpisodeBatch), sorted by workflow id:
    the final attempt of each (task, sample).

    Visibility lags a little behind completion: wait up to `wait_s` for `expected`.
    Episodes whose workflow failed have no result and are left out.
    """
    query = episodes_query(batch)
    deadline = asyncio.get_running_loop().time() + wait_s
    while (await client.count_workflows(query)).count < expected:
        if asyncio.get_running_loop().time() >= deadline:
            break
        await asyncio.sleep(0.25)
    ids = await episode_ids(client, batch)
    gate = asyncio.Semaphore(concurrency)

    async def one(wid: str) -> EpisodeResult | None:
        async with gate:
            try:
                return await client.get_workflow_handle(wid, result_type=EpisodeResult).result()
            except Exception:  # the episode workflow failed: it has no result
                return None

    results = await asyncio.gather(*(one(w) for w in ids))
    return [r for r in results if r is not None]
