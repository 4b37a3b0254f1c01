"""A retried drive replays recorded turns from the session; the harness sees each message once.

Two ways an acknowledgement gets lost, each injected once on a real worker:
- the `record_turns` Update carrying turn 1 lands in the workflow, but the drive never
  hears back: the drive fails mid-episode and Temporal retries it from turn 0;
- the whole drive finishes (turns, score), but its completion is lost: Temporal runs
  it again from turn 0.
Either way the counting harness answers 1, 2, 3 (a re-sent turn would show a jump).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import uuid

from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    Client,
    OutboundInterceptor,
    StartWorkflowUpdateInput,
    WorkflowHandle,
    WorkflowUpdateHandle,
)
from temporalio.client import Interceptor as ClientInterceptor
from temporalio.exceptions import ApplicationError
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
    Replayer,
)

from episodes.client import EpisodesClient
from episodes.payloads.settings import configured_data_converter
from episodes.types.io import DriveResult, EpisodeProgress
from episodes.types.results import EpisodeResult, TurnResult
from tests.conftest import ROOT
from tests.support.helpers import spec
from workers.worker import EpisodeWorker, WorkerOptions
from workflows.episode import EpisodeWorkflow

COUNTING = [sys.executable, str(ROOT / "tests" / "support" / "harnesses" / "counting_harness.py")]


class LoseUpdateResponseOnce(ClientInterceptor):
    """The Update carrying turn 1 is recorded by the workflow; its answer is 'lost' once."""

    def __init__(self) -> None:
        self.injected = 0

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        outer = self

        class _Out(OutboundInterceptor):
            async def start_workflow_update(
                self, input: StartWorkflowUpdateInput
            ) -> WorkflowUpdateHandle:
                handle = await super().start_workflow_update(input)
                if input.update != "record_turns" or outer.injected:
                    return handle
                if 1 in [r.record.turn for r in input.args[0]]:
                    await handle.result()  # it did land
                    outer.injected += 1
                    raise ApplicationError("injected: the update response was lost")
                return handle

        return _Out(next)


class LoseDriveCompletionOnce(Interceptor):
    """The first drive runs every turn and scores, then its completion is 'lost'
    (`kind="turn"`: the first attempt of turn 1's activity, for `turn_mode: activity`)."""

    def __init__(self, kind: str = "drive") -> None:
        self.injected = 0
        self.kind = kind

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        outer = self

        class _In(ActivityInboundInterceptor):
            async def execute_activity(self, input: ExecuteActivityInput):  # type: ignore[no-untyped-def]
                result = await super().execute_activity(input)
                info = activity.info()
                first = info.attempt == 1 and info.activity_type == outer.kind
                if first and (outer.kind == "drive" or input.args[0].turn == 1):
                    outer.injected += 1
                    raise ApplicationError("injected: the completion was lost")
                return result

        return _In(next)


async def _run_counting_episode(
    client: Client, queue: str, turns: int = 3, delay_s: float = 0.0, turn_mode: str = "drive"
) -> tuple[EpisodeResult, WorkflowHandle]:
    s = spec(
        name=f"once-{uuid.uuid4().hex[:6]}",
        command=COUNTING,
        tasks=[{"id": "t0", "data": {"messages": [f"m{i}" for i in range(turns)]}}],
        harness={"env": {"COUNTING_DELAY_S": str(delay_s)}},
        turn_mode=turn_mode,
    )
    handle = await EpisodesClient(client, task_queue=queue).start_episode(s, s.tasks[0])
    return await asyncio.wait_for(handle.result(), 60), handle


async def _drive_attempts(handle: WorkflowHandle) -> list[int]:
    scheduled: dict[int, str] = {}
    attempts = []
    async for ev in handle.fetch_history_events():
        if ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled[ev.event_id] = ev.activity_task_scheduled_event_attributes.activity_type.name
        elif ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            a = ev.activity_task_started_event_attributes
            if scheduled[a.scheduled_event_id] == "drive":
                attempts.append(a.attempt)
    return attempts


async def _recorded_turns(client: Client, handle: WorkflowHandle) -> list[int]:
    """The turns every accepted `record_turns` Update and every completed drive carried
    (a drive's result holds its last turns), in history order."""
    turns = []
    scheduled: dict[int, str] = {}
    async for ev in handle.fetch_history_events():
        if ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled[ev.event_id] = ev.activity_task_scheduled_event_attributes.activity_type.name
        elif ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            attrs = ev.activity_task_completed_event_attributes
            if scheduled[attrs.scheduled_event_id] == "drive":
                [drive] = await client.data_converter.decode(
                    list(attrs.result.payloads), [DriveResult]
                )
                turns += [r.record.turn for r in drive.turns]
        elif ev.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            req = ev.workflow_execution_update_accepted_event_attributes.accepted_request
            [batch] = await client.data_converter.decode(
                list(req.input.args.payloads), [list[TurnResult]]
            )
            turns += [r.record.turn for r in batch]
    return turns


async def _assert_each_turn_sent_once(handle: WorkflowHandle, turns: int = 3) -> None:
    progress = await handle.query("progress", result_type=EpisodeProgress)
    assert [t.reply["received"] for t in progress.turns] == list(range(1, turns + 1))
    assert [t.reply["message"] for t in progress.turns] == [f"m{i}" for i in range(turns)]
    assert len({t.reply["proc"] for t in progress.turns}) == 1  # one live harness
    # The history with its retried drive (and repeated Updates) replays deterministically.
    replayer = Replayer(
        workflows=[EpisodeWorkflow], data_converter=configured_data_converter(), debug_mode=True
    )
    await replayer.replay_workflow(await handle.fetch_history())


@contextlib.asynccontextmanager
async def _worker(client: Client, queue: str, **kw):  # type: ignore[no-untyped-def]
    w = EpisodeWorker(client, WorkerOptions(task_queue=queue), **kw)
    running = asyncio.create_task(w.run())
    try:
        yield w
    finally:
        w.request_stop()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(running, 30)


async def test_lost_update_response_retries_the_drive_without_resending(client, dev_server) -> None:
    queue = f"once-update-{uuid.uuid4().hex[:6]}"
    chaos = LoseUpdateResponseOnce()
    # The drive sends its Updates through its worker's client: that one loses the answer.
    lossy = await Client.connect(
        dev_server.address, data_converter=configured_data_converter(), interceptors=[chaos]
    )
    async with _worker(lossy, queue) as w:
        # Slow turns: turn 1 rides on an Update of its own (the last turn, on the result).
        result, handle = await _run_counting_episode(client, queue, turns=4, delay_s=0.2)
        assert chaos.injected == 1
        assert result.termination == "env_done" and result.turns == 4
        assert await _drive_attempts(handle) == [2]  # the retried drive completed it
        await _assert_each_turn_sent_once(handle, turns=4)
        assert len(w.registry) == 0


async def test_lost_drive_completion_is_not_resent_or_rerecorded(client) -> None:
    queue = f"once-drive-{uuid.uuid4().hex[:6]}"
    chaos = LoseDriveCompletionOnce()
    async with _worker(client, queue, interceptors=[chaos]) as w:
        result, handle = await _run_counting_episode(client, queue)
        assert chaos.injected == 1
        assert result.termination == "env_done" and result.turns == 3
        assert await _drive_attempts(handle) == [2]
        await _assert_each_turn_sent_once(handle)
        # The second drive answered from the first one's result (that drive had released
        # the session): each turn is recorded once, by an Update or the drive's result.
        assert sorted(await _recorded_turns(client, handle)) == [0, 1, 2]
        assert len(w.registry) == 0


async def test_activity_mode_lost_turn_completion_is_not_resent(client) -> None:
    """`turn_mode: activity`: turn 1's activity runs, its completion is lost; the retried
    activity gets the session's recorded result and the harness sees each message once."""
    queue = f"once-turn-{uuid.uuid4().hex[:6]}"
    chaos = LoseDriveCompletionOnce("turn")
    async with _worker(client, queue, interceptors=[chaos]) as w:
        result, handle = await _run_counting_episode(client, queue, turn_mode="activity")
        assert chaos.injected == 1
        assert result.termination == "env_done" and result.turns == 3
        await _assert_each_turn_sent_once(handle)
        assert len(w.registry) == 0
