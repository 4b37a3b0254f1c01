"""With two workers, every session activity runs on the worker that provisioned it.

Asserted from the workflow histories (task queues and worker identities), not logs.
The turns run inside the `drive` activity there and reach the workflow as
`record_turns` Updates named after the session.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid

from temporalio.api.enums.v1 import EventType

from episodes.client import EpisodesClient
from episodes.client.connect import connect
from episodes.types.io import EpisodeProgress
from episodes.types.results import TurnResult
from tests.support.helpers import drive_result_turns, spec
from workers.worker import EpisodeWorker, WorkerOptions


async def test_session_activities_stay_on_the_provisioning_worker(client, dev_server) -> None:
    queue = f"route-{uuid.uuid4().hex[:6]}"
    # Two worker processes' worth: each worker gets its own connection, as it would.
    clients = [await connect(dev_server.address) for _ in range(2)]
    workers = [EpisodeWorker(c, WorkerOptions(task_queue=queue)) for c in clients]
    runs = [asyncio.create_task(w.run()) for w in workers]
    try:
        tasks = [{"id": f"t{i}", "data": {"messages": ["a", "b", "c", "d"]}} for i in range(8)]
        s = spec(name=f"route-{uuid.uuid4().hex[:6]}", tasks=tasks)
        ec = EpisodesClient(client, task_queue=queue)
        handles = [await ec.start_episode(s, t) for t in s.tasks]
        results = await asyncio.gather(*(h.result() for h in handles))
        assert all(r.termination == "env_done" for r in results)

        session_queues = {w.session_queue: w.worker_id for w in workers}
        used_workers = set()
        for h in handles:
            scheduled: dict[int, tuple[str, str]] = {}
            started_by: list[tuple[str, str, str]] = []
            updates: list[tuple[str, list[TurnResult]]] = []
            async for ev in h.fetch_history_events():
                if ev.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
                    req = ev.workflow_execution_update_accepted_event_attributes.accepted_request
                    payloads = list(req.input.args.payloads)
                    [batch] = await client.data_converter.decode(payloads, [list[TurnResult]])
                    updates.append((req.meta.update_id, batch))
                elif ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                    a = ev.activity_task_scheduled_event_attributes
                    scheduled[ev.event_id] = (a.activity_type.name, a.task_queue.name)
                elif ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                    a = ev.activity_task_started_event_attributes
                    name, tq = scheduled[a.scheduled_event_id]
                    started_by.append((name, tq, a.identity))
            provision = [x for x in started_by if x[0] == "provision"]
            assert len(provision) == 1
            owner = provision[0][2].split("@")[0]
            used_workers.add(owner)
            rest = [x for x in started_by if x[0] != "provision"]
            # The drive releases the session itself at the episode's normal end.
            assert sorted(x[0] for x in rest) == ["drive"]
            for name, tq, identity in rest:
                assert tq in session_queues, (name, tq)
                assert session_queues[tq] == owner, f"{name} left its worker"
                assert identity == f"{owner}@session"
            # Every turn was recorded by that session's drive: its Updates, its result.
            ref = (await h.query("progress", result_type=EpisodeProgress)).session
            assert ref is not None and ref.worker_id == owner
            recorded = [
                r.record.turn
                for u in updates
                if u[0].startswith(f"{ref.session_id}:turns-")
                for r in u[1]
            ]
            recorded += [r.record.turn for r in await drive_result_turns(client, h)]
            assert sorted(recorded) == [0, 1, 2, 3], updates
        # Not a vacuous pass: both workers held sessions.
        assert used_workers == {w.worker_id for w in workers}
    finally:
        for w in workers:
            w.request_stop()
        for r in runs:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(r, 30)
