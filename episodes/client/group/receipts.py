"""A batch's receipts, seen from the client: acknowledge a group, record a dispatch, read
it all back (`BatchReceiptsWorkflow`, workflows/receipts.py).

    async for group in client.run_batch(spec, groups=True, batch_id="run-7", ...):
        train(group)
        await group.ack()          # kept on the server: never handed out again

Acknowledgements live on the Temporal server, not in a local file: a trainer that
restarts, on this machine or another, runs the batch again under the same id and
gets each group it did not acknowledge exactly once (those that ended at once, those
still running as they end), never one it did. Each record is one signal (signal-with-
start: the first record starts the receipts workflow); it is durable once the call returns.

The receipts are read from its history (the start input, which continue-as-new carries,
and the signals since), so reading needs no worker. `receipts_status` adds what the
visibility store says is still running: `episodes batch status B`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from episodes import contract
from episodes import search_attributes as sa
from episodes.types.receipts import Dispatched, ReceiptsInput


@dataclass
class ReceiptsState:
    """What a batch's receipts hold."""

    batch: str
    exists: bool = False
    closed: bool = False
    """Every group acknowledged: the receipts workflow ended."""
    groups: int | None = None
    acks: list[str] = field(default_factory=list)
    """Every acknowledgement recorded, in order (a second one of a group included)."""
    versions: dict[str, int] = field(default_factory=dict)

    @property
    def acked(self) -> set[str]:
        return set(self.acks)


class Receipts:
    """One batch's receipts on `client`, run by the workers of `task_queue`."""

    def __init__(self, client: Client, task_queue: str, batch: str, groups: int) -> None:
        self.client, self.task_queue, self.batch, self.groups = client, task_queue, batch, groups

    async def ack(self, group_id: str) -> None:
        """Record that the trainer consumed `group_id` (idempotent)."""
        await self._record(contract.ACK, group_id)

    async def dispatched(self, group_id: str, version: int) -> None:
        """Record the version `group_id` was (re)dispatched at."""
        await self._record(contract.DISPATCHED, Dispatched(group_id=group_id, version=version))

    async def _record(self, signal: str, arg: object) -> None:
        try:
            await self.client.start_workflow(
                contract.RECEIPTS_WORKFLOW,
                ReceiptsInput(batch=self.batch, groups=self.groups),
                id=contract.receipts_workflow_id(self.batch),
                task_queue=self.task_queue,
                start_signal=signal,
                start_signal_args=[arg],
                # Ended receipts (every group acknowledged) is never started afresh.
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                static_summary=f"receipts of batch {self.batch}",
            )
        except WorkflowAlreadyStartedError:
            pass  # ended: every group is acknowledged already

    async def read(self) -> ReceiptsState:
        return await read_receipts(self.client, self.batch)


async def read_receipts(client: Client, batch: str) -> ReceiptsState:
    """The receipts, folded from its latest run's history (empty: none yet)."""
    state = ReceiptsState(batch)
    handle = client.get_workflow_handle(contract.receipts_workflow_id(batch))
    try:
        history = await handle.fetch_history()
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            return state
        raise
    convert = client.data_converter
    state.exists = True
    for ev in history.events:
        if ev.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            payloads = ev.workflow_execution_started_event_attributes.input.payloads
            [inp] = await convert.decode(payloads, [ReceiptsInput])
            state.groups = inp.groups
            state.acks = list(inp.acked)
            state.versions = dict(inp.versions)
        elif ev.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            attrs = ev.workflow_execution_signaled_event_attributes
            if attrs.signal_name == contract.ACK:
                [gid] = await convert.decode(attrs.input.payloads, [str])
                state.acks.append(gid)
            elif attrs.signal_name == contract.DISPATCHED:
                [d] = await convert.decode(attrs.input.payloads, [Dispatched])
                state.versions[d.group_id] = d.version
        elif ev.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
            state.closed = True
    return state


@dataclass
class ReceiptsStatus:
    """`episodes batch status B`: the batch's groups as its trainer left them."""

    batch: str
    groups: int | None
    acknowledged: int
    outstanding: int | None
    """Not acknowledged yet (None: the receipts never heard of the batch's size)."""
    running: int
    """Groups with an episode (or group workflow) still running."""
    twice: int
    """Acknowledgements of a group acknowledged already (0 unless a trainer acked twice)."""


async def receipts_status(client: Client, batch: str) -> ReceiptsStatus:
    state = await read_receipts(client, batch)
    running: set[str] = set()
    query = f'{sa.BATCH.name} = "{batch}" AND ExecutionStatus = "Running"'
    async for wf in client.list_workflows(query):
        task = wf.typed_search_attributes.get(sa.TASK)
        if task is not None:
            running.add(task)
    acked = state.acked
    prefix = contract.group_id(batch, "")
    running -= {g[len(prefix) :] for g in acked if g.startswith(prefix)}
    return ReceiptsStatus(
        batch=batch,
        groups=state.groups,
        acknowledged=len(acked),
        outstanding=None if state.groups is None else state.groups - len(acked),
        running=len(running),
        twice=len(state.acks) - len(acked),
    )
