"""Fork an episode at a turn: branches that replay its first turns exactly, then go on live.

    handles = await client.fork("kv.ab.s0", at_turn=2, samples=4)
    results = [await h.result() for h in handles]    # each `forked_from` the parent

Each branch is a new EpisodeWorkflow (`<parent>.f<k>.<i>`) whose input names the parent
and the turn (`EpisodeInput.fork`): it opens a fresh box, harness and env, replays the
parent's turns `0..k-1` from the parent's history with the session's services in exact
replay (episodes/replay.py: the model and tool calls answered from the record),
then drives on live from turn k. The parent is only read: running or finished, it is
untouched. A branch's transcript starts with the parent's k turns (`replayed_turns`):
their model calls are prompt to a trainer, never completion (episodes/training/samples.py).

The branches of one fork are a group (the same state, sampled on: GRPO's group): their
batch id is `<parent>.f<k>` (search attribute `EpisodeBatch`), so `fork_group` yields
them as one `Group` and `episodes export <parent>.f<k>` writes them as one group, the
advantages among the branches only.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from temporalio.client import Client, WorkflowHandle

from episodes import contract
from episodes.client.starting import start_options, start_or_attach
from episodes.errors import EpisodeFailed, EpisodesError
from episodes.types.io import EpisodeInput
from episodes.types.results import WORKFLOW_FAILED, EpisodeResult, ForkOrigin, is_infra_failure

if TYPE_CHECKING:
    from episodes.client.group.stream import Group


def fork_batch_id(workflow_id: str, at_turn: int) -> str:
    """The batch the branches of one fork make (their `EpisodeBatch`): one group."""
    return f"{workflow_id}.f{at_turn}"


def branch_id(workflow_id: str, at_turn: int, branch: int) -> str:
    return f"{fork_batch_id(workflow_id, at_turn)}.{branch}"


async def parent_input(client: Client, workflow_id: str) -> EpisodeInput:
    """The input the parent episode was started with (its latest run's, carry dropped)."""
    from temporalio.service import RPCError

    try:
        async for ev in client.get_workflow_handle(workflow_id).fetch_history_events(page_size=1):
            attrs = ev.workflow_execution_started_event_attributes
            if attrs.workflow_type.name != contract.EPISODE_WORKFLOW:
                raise EpisodesError(
                    f"{workflow_id} is a {attrs.workflow_type.name}, not an episode: "
                    "only episodes (EpisodeWorkflow) can be forked"
                )
            [inp] = await client.data_converter.decode(
                list(attrs.input.payloads)[:1], [EpisodeInput]
            )
            return inp.model_copy(update={"carry": None})
    except RPCError as e:
        raise EpisodesError(f"no episode {workflow_id!r}: {e.message}") from None
    raise EpisodesError(f"no episode {workflow_id!r}")


async def start_branches(
    client: Client,
    task_queue: str,
    workflow_id: str,
    *,
    at_turn: int,
    samples: int = 1,
    policy_version: int | None = None,
) -> tuple[EpisodeInput, list[WorkflowHandle[object, EpisodeResult]]]:
    """Start `samples` branches of `workflow_id` at `at_turn` (or attach to the ones
    already started under their ids, running or closed; a failed one starts anew): the
    parent's input (read once) and the branches' handles, in branch order."""
    from episodes.client.batch.dispatch import dispatch_spec
    from episodes.client.histories.transcript import recorded_turns

    if samples < 1:
        raise EpisodesError(f"fork: samples must be at least 1, not {samples}")
    if at_turn < 0:
        raise EpisodesError(f"fork: at_turn must be 0 or more, not {at_turn}")
    parent = await parent_input(client, workflow_id)
    if at_turn >= parent.spec.max_turns:
        raise EpisodesError(
            f"fork: at_turn {at_turn} leaves no turn to run (the spec's max_turns is "
            f"{parent.spec.max_turns}); fork at an earlier turn"
        )
    # The parent must have recorded the turns the branches replay (it may still run).
    await recorded_turns(client, workflow_id, at_turn)
    spec = dispatch_spec(parent.spec, policy_version)
    batch = fork_batch_id(workflow_id, at_turn)
    handles = []
    for i in range(samples):
        inp = parent.model_copy(
            update={
                "spec": spec,
                "batch": batch,
                "fork": ForkOrigin(workflow_id=workflow_id, at_turn=at_turn, branch=i),
            }
        )
        wid = branch_id(workflow_id, at_turn, i)
        options = start_options(
            spec,
            inp.task,
            # Findable as a batch of their own: `episodes export <id>.f<k>`.
            batch,
            workflow_id=wid,
            task_queue=task_queue,
            summary=f"fork of {workflow_id} at turn {at_turn} · branch {i}",
        )
        # One that completed under its id is attached to: its result stands.
        handle, _ = await start_or_attach(
            client, contract.EPISODE_WORKFLOW, inp, EpisodeResult, options
        )
        handles.append(handle)
    return parent, handles


async def fork_episode(
    client: Client,
    task_queue: str,
    workflow_id: str,
    *,
    at_turn: int,
    samples: int = 1,
    policy_version: int | None = None,
) -> list[WorkflowHandle[object, EpisodeResult]]:
    """`start_branches`: the branches' handles, in branch order."""
    _, handles = await start_branches(
        client,
        task_queue,
        workflow_id,
        at_turn=at_turn,
        samples=samples,
        policy_version=policy_version,
    )
    return handles


async def branch_ended(
    handle: WorkflowHandle[object, EpisodeResult], parent: EpisodeInput, began: float
) -> tuple[EpisodeResult, bool]:
    """The branch's result once it ended (a failed workflow: a `workflow_failed` result,
    not a raise; `began`: the fork's start, monotonic) and whether it ended for an
    infrastructure reason."""
    from episodes.client.batch.dispatch import await_result, failed_result

    try:
        result = await await_result(handle)
    except EpisodeFailed as e:
        took = time.monotonic() - began
        failed = failed_result(parent.spec, parent.task, parent.sample, e, took)
        return failed, is_infra_failure(WORKFLOW_FAILED, provision_failed=e.provision_failed)
    return result, is_infra_failure(result.termination)


async def fork_group(
    client: Client,
    task_queue: str,
    workflow_id: str,
    *,
    at_turn: int,
    samples: int = 1,
    policy_version: int | None = None,
) -> Group:
    """`start_branches`, then the branches as one `Group` (in branch order) once all
    ended. A branch that ended for an infrastructure reason, or whose workflow failed,
    makes the group `failed` (no retries here: fork again to run it anew)."""
    from episodes.client.group.stream import Group, reading
    from episodes.client.histories.transcript import fetch_transcript

    began = time.monotonic()
    parent, handles = await start_branches(
        client,
        task_queue,
        workflow_id,
        at_turn=at_turn,
        samples=samples,
        policy_version=policy_version,
    )
    outcomes = await asyncio.gather(*(branch_ended(h, parent, began) for h in handles))
    why = next(
        (
            f"{r.workflow_id}: {r.termination} ({(r.error or 'no detail')[:300]})"
            for r, infra in outcomes
            if infra
        ),
        None,
    )
    batch = fork_batch_id(workflow_id, at_turn)
    group = Group(
        group_id=contract.group_id(batch, parent.task.id),
        batch=batch,
        task_id=parent.task.id,
        policy_version=policy_version,
        results=[r for r, _ in outcomes],
        failed=why,
    )
    return reading(
        group, lambda wid: fetch_transcript(client, wid), model=parent.spec.model is not None
    )
