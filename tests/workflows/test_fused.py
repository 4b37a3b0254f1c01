"""`provision_and_drive` (issue 22): a first run's provision and drive in one activity.

Against stand-ins on the time-skipping server, as tests/workflows/test_episode.py;
the real activity runs in tests/workflows/test_episode_workflow.py and the chaos
tests (test_worker_lost.py, test_restart.py, tests/workers/).
"""

from __future__ import annotations

import uuid
from typing import Any

from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle
from temporalio.exceptions import ApplicationError

from activities.fused import beaten_session, session_lost
from episodes import contract
from episodes.types.io import (
    DriveInput,
    DriveResult,
    EpisodeInput,
    ProvisionAndDriveInput,
    ProvisionAndDriveResult,
    ProvisionInput,
    SessionRef,
)
from episodes.types.results import EpisodeResult, ScoreResult, TurnResult
from tests.workflows.standins import StandIns, spec, task, turn_result


class Fused(StandIns):
    """`provision_and_drive` as the real one runs it: the provision, then the drive
    here (its heartbeats name the session), never a second session on a retry."""

    async def on_provision_and_drive(self, inp: ProvisionAndDriveInput) -> ProvisionAndDriveResult:
        earlier = beaten_session(activity.info().heartbeat_details)
        if earlier is not None:
            raise session_lost(earlier, "stand-in retry")
        ref = await self.provision(inp.provision)
        activity.heartbeat({"turn": 0, "session": ref.model_dump(mode="json")})
        self.opened = ref
        try:
            drive = await self.drive(inp.drive.model_copy(update={"session_id": ref.session_id}))
        finally:
            self.opened = None
        return ProvisionAndDriveResult(session=ref, drive=drive)

    opened: SessionRef | None = None  # while its drive runs here: its Updates name it

    async def record(
        self, inp: DriveInput, results: list[TurnResult], session: SessionRef | None = None
    ) -> bool:
        return await super().record(inp, results, session or self.opened)


async def start(env: Any, s: StandIns, **inp: Any) -> WorkflowHandle[Any, EpisodeResult]:
    return await env.client.start_workflow(
        contract.EPISODE_WORKFLOW,
        EpisodeInput.model_validate({"spec": spec(), "task": task(), **inp}),
        id=f"fused-{uuid.uuid4().hex[:8]}",
        task_queue=s.shared_queue,
        result_type=EpisodeResult,
    )


async def scheduled(handle: WorkflowHandle[Any, Any]) -> list[str]:
    history = await handle.fetch_history()
    return [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]


async def test_one_activity_runs_the_episode(env) -> None:
    s = Folds(env.client)
    async with s.running():
        handle = await start(env, s)
        result = await handle.result()
        history = await handle.fetch_history()
    assert (result.termination, result.turns, result.reward) == ("max_turns", 3, 1.0)
    assert await scheduled(handle) == ["provision_and_drive"]  # no provision, drive, release
    tasks = sum(
        e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED for e in history.events
    )
    # Start, the activity's result (plus the patch marker and the Update of turns 0-1).
    assert tasks <= 4, tasks


class Folds(Fused):
    """A drive that records its first turns, returns the last and released the session."""

    async def on_drive(self, inp: DriveInput) -> DriveResult:
        await self.record(inp, [turn_result(n) for n in range(inp.first_turn, inp.max_turns - 1)])
        return DriveResult(
            termination="max_turns",
            next_turn=inp.max_turns,
            score=ScoreResult(reward=1.0),
            turns=[turn_result(inp.max_turns - 1)],
            released=True,
        )


class WontStart(Fused):
    async def on_provision(self, inp: ProvisionInput) -> SessionRef:
        raise ApplicationError(
            "harness exited before ready", type="harness_start_failed", non_retryable=True
        )


async def test_a_harness_start_failure_is_the_same_outcome(env) -> None:
    s = WontStart(env.client)
    async with s.running():
        handle = await start(env, s)
        result = await handle.result()
    assert (result.termination, result.error) == (
        "harness_start_failed",
        "harness exited before ready",
    )
    assert (result.turns, result.reward) == (0, None)
    assert s.calls == {"provision": 1}  # not retried, nothing to release
    assert await scheduled(handle) == ["provision_and_drive"]


class Pauses(Fused):
    async def on_drive(self, inp: DriveInput) -> DriveResult:
        for n in range(inp.first_turn, inp.max_turns):
            if not await self.record(inp, [turn_result(n)]) and n + 1 < inp.max_turns:
                return DriveResult(next_turn=n + 1)
        return DriveResult(
            termination="max_turns", next_turn=inp.max_turns, score=ScoreResult(reward=1.0)
        )


async def test_a_paused_first_run_hands_its_session_to_the_next(env) -> None:
    s = Pauses(env.client)
    async with s.running():
        handle = await start(env, s, spec=spec(max_turns=5), turns_per_run=2)
        result = await handle.result()
        first = env.client.get_workflow_handle(handle.id, run_id=handle.first_execution_run_id)
        first_run = await scheduled(first)
    assert (result.termination, result.turns, result.reward) == ("max_turns", 5, 1.0)
    assert first_run == ["provision_and_drive"]
    assert (s.calls["provision"], s.calls["drive"], s.calls["release"]) == (1, 3, 1)
    drives = s.inputs["drive"]
    assert [d.first_turn for d in drives] == [0, 2, 4]
    assert len({d.session_id for d in drives}) == 1


class Silent(Fused):
    """Records a turn, then stops heartbeating (its worker died)."""

    async def on_drive(self, inp: DriveInput) -> DriveResult:
        await self.record(inp, [turn_result(0)])
        await self.hang()
        raise AssertionError("unreachable")


async def test_a_lost_worker_is_worker_lost_and_no_second_session(env) -> None:
    s = Silent(env.client)
    async with s.running():
        result = await (await start(env, s, spec=spec(worker_lost_timeout_s=0.5))).result()
    assert result.termination == "worker_lost"
    assert result.error and "lost the session" in result.error and "s-fused-" in result.error
    assert result.turns == 1
    assert result.reward == 0.25  # score_transcript's: nothing sent to the lost worker
    # The retry the test server makes (the dev server does not retry the timeout)
    # opens no second session.
    assert (s.calls["provision"], s.calls["drive"], s.calls["release"]) == (1, 1, 0)


class SilentThenRestores(Silent):
    async def on_drive(self, inp: DriveInput) -> DriveResult:
        if inp.first_turn == 0:
            return await super().on_drive(inp)
        return await StandIns.on_drive(self, inp)


async def test_a_lost_worker_restarts_through_restore(env) -> None:
    s = SilentThenRestores(env.client)
    async with s.running():
        handle = await start(env, s, spec=spec(worker_lost_timeout_s=0.5, on_worker_lost="restart"))
        result = await handle.result()
    assert (result.termination, result.turns, result.restarts) == ("max_turns", 3, 1)
    assert s.calls["restore"] == 1
    assert [d.first_turn for d in s.inputs["drive"]] == [0, 1]  # the new session drives on
    assert (await scheduled(handle))[:2] == ["provision_and_drive", "restore"]


class Hangs(Fused):
    async def on_drive(self, inp: DriveInput) -> DriveResult:
        await self.record(inp, [turn_result(0)])
        await self.hang()
        raise AssertionError("unreachable")


async def test_cancel_releases_the_session_it_learned_from_the_first_update(own_env) -> None:
    s = Hangs(own_env.client)
    async with s.running():
        handle = await start(own_env, s, spec=spec(worker_lost_timeout_s=60))
        await s.started("drive")
        await handle.cancel()
        result = await handle.result()
    assert (result.termination, result.turns) == ("cancelled", 1)
    [release] = s.inputs["release"]
    assert release.session_id == f"s-{handle.id}"
