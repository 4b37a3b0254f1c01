"""A batch's outcomes and manifest, read back from its histories (`episodes compare`).

The batch's episodes are found as `episodes export` finds them (the EpisodeBatch search
attribute: `final_episodes`, the final attempt of each (task, sample), and the members
of its group workflows); each one's result is read from its history chain as
`episodes show` reads it (`load_transcript`, through the client's data converter), and
so are the `system_fingerprint` and served `model` of its model calls. An episode with
no result counts as still running, or, once its workflow closed without one, as
`workflow_failed` (an infrastructure failure: left out of the figures,
`episodes.evals.summary`). The manifest is the memo the client wrote at start
(`episodes.evals.manifest`): the batch workflow's for a server batch, else the first
episode's. No worker is needed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus
from temporalio.service import RPCError

from episodes import contract
from episodes import search_attributes as sa
from episodes.client.batch.server import final_episodes
from episodes.client.group.history import group_members
from episodes.client.histories.transcript import load_transcript
from episodes.errors import EpisodesError
from episodes.evals.manifest import MEMO_KEY, fingerprints
from episodes.evals.summary import Outcome
from episodes.types.attempts import member_id
from episodes.types.results import WORKFLOW_FAILED

READ_CONCURRENCY = 16  # histories read at once (as `episodes export`)


@dataclass
class BatchOutcomes:
    batch: str
    outcomes: list[Outcome]
    manifest: dict[str, Any] | None
    """The memo's manifest with the fingerprints the histories showed; None when the
    batch was started before manifests existed."""


async def read_outcomes(
    client: Client,
    batch: str,
    *,
    on_found: Callable[[int], None] | None = None,
    on_read: Callable[[str], None] | None = None,
) -> BatchOutcomes:
    """Every final episode of `batch`, as an `Outcome`, and its manifest. `on_found`
    gets how many episodes there are, `on_read` each one's id once read."""
    found = [*await final_episodes(client, batch), *await group_members(client, batch)]
    if not found:
        raise EpisodesError(f"batch {batch!r}: no episodes found (none has EpisodeBatch={batch})")
    if on_found is not None:
        on_found(len(found))
    gate = asyncio.Semaphore(READ_CONCURRENCY)
    responses: list[Any] = []

    async def one(wf: WorkflowExecution) -> Outcome:
        async with gate:
            data = await load_transcript(client, wf.id)
        if on_read is not None:
            on_read(wf.id)
        for turn in data["turns"]:
            for ev in (turn.get("record") or {}).get("events") or ():
                if isinstance(ev, dict) and ev.get("kind") == "model_call":
                    responses.append(ev.get("response"))
        r = data["result"]
        if r is not None:
            return Outcome(r["task_id"], r.get("reward"), r["termination"])
        task = wf.typed_search_attributes.get(sa.TASK) or member_id(wf.id)
        running = wf.status in (None, WorkflowExecutionStatus.RUNNING)
        return Outcome(task, None, None if running else WORKFLOW_FAILED)

    outcomes = list(await asyncio.gather(*(one(wf) for wf in found)))
    manifest = await batch_manifest(client, batch, [wf.id for wf in found[:3]])
    if manifest is not None:
        manifest = {**manifest, **fingerprints(responses)}
    return BatchOutcomes(batch, outcomes, manifest)


async def batch_manifest(
    client: Client, batch: str, episode_ids: list[str]
) -> dict[str, Any] | None:
    """The manifest in the memo of the batch workflow (`batch.<id>`, or a scheduled
    run's, whose workflow id is its batch id), else of the first of `episode_ids` that
    has one (the viewer passes a few of the batch's)."""
    for wid in [contract.batch_workflow_id(batch), batch, *episode_ids]:
        try:
            memo = await (await client.get_workflow_handle(wid).describe()).memo()
        except RPCError:  # no such workflow (a client-side batch has no batch workflow)
            continue
        manifest = memo.get(MEMO_KEY)
        if isinstance(manifest, dict):
            return manifest
    return None
