"""Stand-in activities under the real names, and a worker pair that runs them.

Each stand-in is declared with the name of its `episodes.contract` declaration and the
same signature (test_standins_match_the_contract checks), counts its calls and hands
the work to an `on_<name>` hook a test overrides. No harness, no box, no process:
these tests are about what the workflows make of what the activities do.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from episodes import contract
from episodes.client.histories.transcript import recorded_usage as read_usage
from episodes.types.group import GroupInput, GroupProgress, GroupResult
from episodes.types.io import (
    DriveInput,
    DriveResult,
    ProvisionInput,
    ReleaseInput,
    RestoreInput,
    RestoreResult,
    ScoreInput,
    ScoreTranscriptInput,
    SessionRef,
    TurnInput,
)
from episodes.types.priority import RecordedUsage
from episodes.types.results import (
    EpisodeResult,
    ScoreResult,
    StepOutcome,
    Task,
    TurnRecord,
    TurnResult,
)
from episodes.types.spec import EpisodeSpec
from workflows import WORKFLOWS


def spec(**overrides: Any) -> EpisodeSpec:
    fields: dict[str, Any] = {
        "name": "wf",
        "env": "script",
        "tasks": [{"id": "t"}],
        "harness": {"command": ["stand-in"]},
        "max_turns": 3,
        "worker_lost_timeout_s": 5,
    }
    return EpisodeSpec.model_validate(fields | overrides)


def turn_result(n: int, *, done: bool = False) -> TurnResult:
    return TurnResult(
        record=TurnRecord(turn=n, message=f"m{n}", reply=f"r{n}"),
        observation=StepOutcome(message=f"m{n + 1}", done=done),
    )


class StandIns:
    """The activities of one test, on queues of its own."""

    def __init__(self, client: Client) -> None:
        self.client = client
        tag = uuid.uuid4().hex[:8]
        self.shared_queue = f"wf-{tag}"
        self.session_queue = f"wf-{tag}-session"
        self.calls: Counter[str] = Counter()
        self.inputs: defaultdict[str, list[Any]] = defaultdict(list)
        self._started: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)
        # Set by `release` (the harness is stopped) and at teardown: what hangs, ends.
        self.released = asyncio.Event()

    def _call(self, name: str, inp: Any) -> None:
        self.calls[name] += 1
        self.inputs[name].append(inp)
        self._started[name].set()

    async def started(self, name: str) -> None:
        """Until the stand-in `name` has been called (in real time: the test server runs)."""
        await asyncio.wait_for(self._started[name].wait(), 30)

    async def hang(self) -> None:
        """Block like a busy activity until the session is released, then fail as a stopped
        harness would."""
        await self.released.wait()
        raise ApplicationError("the session was released under this call", non_retryable=True)

    async def record(self, inp: DriveInput, results: list[TurnResult]) -> bool:
        """Record turns in the workflow the way the real drive does: a record_turns Update."""
        handle = self.client.get_workflow_handle(inp.workflow_id, run_id=inp.run_id)
        first, last = results[0].record.turn, results[-1].record.turn
        return await handle.execute_update(
            contract.RECORD_TURNS,
            results,
            id=f"{inp.session_id}:turns-{first}-{last}",
            result_type=bool,
        )

    # -- the activities (names and signatures from episodes.contract) ---------------------

    @activity.defn(name=contract.PROVISION)
    async def provision(self, inp: ProvisionInput) -> SessionRef:
        self._call("provision", inp)
        return await self.on_provision(inp)

    @activity.defn(name=contract.DRIVE)
    async def drive(self, inp: DriveInput) -> DriveResult:
        self._call("drive", inp)
        return await self.on_drive(inp)

    @activity.defn(name=contract.TURN)
    async def turn(self, inp: TurnInput) -> TurnResult:
        self._call("turn", inp)
        return await self.on_turn(inp)

    @activity.defn(name=contract.SCORE)
    async def score(self, inp: ScoreInput) -> ScoreResult:
        self._call("score", inp)
        return await self.on_score(inp)

    @activity.defn(name=contract.RELEASE)
    async def release(self, inp: ReleaseInput) -> None:
        self._call("release", inp)
        self.released.set()

    @activity.defn(name=contract.SCORE_TRANSCRIPT)
    async def score_transcript(self, inp: ScoreTranscriptInput) -> ScoreResult:
        self._call("score_transcript", inp)
        return await self.on_score_transcript(inp)

    @activity.defn(name=contract.AWAIT_EPISODE)
    async def await_episode(self, workflow_id: str) -> EpisodeResult:
        self._call("await_episode", workflow_id)
        handle = self.client.get_workflow_handle(workflow_id, result_type=EpisodeResult)
        return await handle.result()

    @activity.defn(name=contract.RUN_GROUP)
    async def run_group(self, inp: GroupInput) -> GroupProgress:
        """Group execution's one activity: its workflow logic is tested on a real server
        (tests/episodes/client/test_group_execution.py); here it only has a stand-in so
        every declared activity has one."""
        self._call("run_group", inp)
        raise ApplicationError("no group stand-in", non_retryable=True)

    @activity.defn(name=contract.AWAIT_GROUP)
    async def await_group(self, workflow_id: str) -> GroupResult:
        self._call("await_group", workflow_id)
        handle = self.client.get_workflow_handle(workflow_id, result_type=GroupResult)
        return await handle.result()

    @activity.defn(name=contract.RECORDED_USAGE)
    async def recorded_usage(self, workflow_id: str) -> RecordedUsage:
        """The real reading: the history the time-skipping server holds."""
        self._call("recorded_usage", workflow_id)
        return await read_usage(self.client, workflow_id)

    @activity.defn(name=contract.RESTORE)
    async def restore(self, inp: RestoreInput) -> RestoreResult:
        self._call("restore", inp)
        ref = await self.on_provision(
            ProvisionInput(
                spec=inp.spec,
                task=inp.task,
                sample=inp.sample,
                workflow_id=inp.workflow_id,
                run_id=inp.run_id,
            )
        )
        return RestoreResult(session=ref, turns_replayed=inp.turns)

    # -- what they do: the defaults of a healthy session ----------------------------------

    async def on_provision(self, inp: ProvisionInput) -> SessionRef:
        return SessionRef(
            session_id=f"s-{inp.workflow_id}",
            task_queue=self.session_queue,
            worker_id="stand-in",
            first_message="m0",
        )

    async def on_drive(self, inp: DriveInput) -> DriveResult:
        results = [turn_result(n) for n in range(inp.first_turn, inp.max_turns)]
        if results:
            await self.record(inp, results)
        return DriveResult(
            termination="max_turns", next_turn=inp.max_turns, score=ScoreResult(reward=1.0)
        )

    async def on_turn(self, inp: TurnInput) -> TurnResult:
        return turn_result(inp.turn)

    async def on_score(self, inp: ScoreInput) -> ScoreResult:
        return ScoreResult(reward=0.5)

    async def on_score_transcript(self, inp: ScoreTranscriptInput) -> ScoreResult:
        return ScoreResult(reward=0.25, details={"recorded": len(inp.transcript.turns)})

    # -- the workers ----------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def running(self, *, session_worker: bool = True) -> AsyncIterator[None]:
        """The shared-queue worker (workflows, provision, score_transcript) and, unless a
        test loses it, the session's worker (drive, turn, score, release)."""
        shared = Worker(
            self.client,
            task_queue=self.shared_queue,
            workflows=WORKFLOWS,
            activities=[self.provision, self.restore, self.score_transcript],
        )
        # `await_episode` runs on the side queue (slots of its own, never provision's).
        side = Worker(
            self.client,
            task_queue=contract.side_queue(self.shared_queue),
            activities=[self.await_episode, self.recorded_usage],
        )
        session = Worker(
            self.client,
            task_queue=self.session_queue,
            activities=[self.drive, self.turn, self.score, self.release],
            # The stand-ins heartbeat rarely; send each at once, not throttled.
            max_heartbeat_throttle_interval=timedelta(milliseconds=10),
            default_heartbeat_throttle_interval=timedelta(milliseconds=10),
        )
        async with contextlib.AsyncExitStack() as stack:
            await stack.enter_async_context(shared)
            await stack.enter_async_context(side)
            if session_worker:
                await stack.enter_async_context(session)
            try:
                yield
            finally:
                self.released.set()  # nothing stays blocked past the test


def task() -> Task:
    return Task(id="t")


class HangsIn(StandIns):
    """Hangs in one phase (`provisioning` here; a test adds its own), so the test can
    cancel the episode there."""

    def __init__(self, client: Client, phase: str) -> None:
        super().__init__(client)
        self.phase = phase

    async def on_provision(self, inp: ProvisionInput) -> SessionRef:
        if self.phase == "provisioning":
            await self.hang()
        return await super().on_provision(inp)
