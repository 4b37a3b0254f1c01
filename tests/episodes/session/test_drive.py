"""The drive's `record_turns` Updates: pipelined, in order, bounded in turns and bytes.

Read back from the workflow history: each accepted Update's payload and the turns
it carried.
"""

from __future__ import annotations

import uuid

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from episodes.client import EpisodesClient
from episodes.types.results import TurnResult
from episodes.types.tuning import DEFAULT_PIPELINE, DEFAULT_UPDATE_BYTES
from tests.support.envs import ENDLESS
from tests.support.helpers import drive_result_turns, spec

QUEUE = "episodes-test"


async def _updates(client: Client, handle: WorkflowHandle) -> list[tuple[int, list[int]]]:
    """(payload bytes, turns carried) of every accepted `record_turns` Update."""
    out = []
    async for ev in handle.fetch_history_events():
        if ev.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            req = ev.workflow_execution_update_accepted_event_attributes.accepted_request
            assert req.input.name == "record_turns"
            payloads = list(req.input.args.payloads)
            [batch] = await client.data_converter.decode(payloads, [list[TurnResult]])
            out.append((len(payloads[0].data), [r.record.turn for r in batch]))
    return out


async def _run(client: Client, **over) -> tuple[WorkflowHandle, list[tuple[int, list[int]]]]:  # type: ignore[no-untyped-def]
    """The Updates' (bytes, turns), then the drive result's last turns as one more batch
    (bytes 0: not an Update)."""
    s = spec(name=f"drive-{uuid.uuid4().hex[:6]}", env=ENDLESS, tasks=[{"id": "t0"}], **over)
    handle = await EpisodesClient(client, task_queue=QUEUE).start_episode(s, s.tasks[0])
    result = await handle.result()
    assert (result.termination, result.turns) == ("max_turns", s.max_turns)
    tail = [r.record.turn for r in await drive_result_turns(client, handle)]
    return handle, await _updates(client, handle) + ([(0, tail)] if tail else [])


async def test_fast_turns_are_recorded_in_order_in_bounded_batches(client, worker) -> None:
    _, updates = await _run(client, max_turns=200)
    batches = [turns for _, turns in updates]
    assert [t for b in batches for t in b] == list(range(200))  # each turn once, in order
    # A turn starts while at most DEFAULT_PIPELINE finished turns are unrecorded.
    assert max(map(len, batches)) <= DEFAULT_PIPELINE + 1, batches
    # Pipelined: the harness answers far faster than an Update's round trip.
    assert len(batches) < 100, batches


async def test_big_turns_split_into_updates_under_the_byte_bound(client, worker) -> None:
    # ~180 KB a turn (message, reply and next message of 60 KB): 3 would pass 512 KiB.
    _, updates = await _run(client, max_turns=20, env_args={"pad": 60_000})
    assert [t for _, b in updates for t in b] == list(range(20))
    sizes = [size for size, _ in updates if size]  # the Updates' (not the result's)
    assert min(sizes) > 150_000 and max(sizes) <= DEFAULT_UPDATE_BYTES, sizes
