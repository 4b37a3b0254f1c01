"""A cancel that arrives while a park releases the session ends the episode now.

The parking release is an activity; a workflow cancel while it runs cancels that
activity, and the workflow used to take the cancelled release for a failed one
(logged, not fatal) and wait parked until `max_parked_s`, then resume and run on.
Now the episode (or interactive session) ends `cancelled` at once, its session
released again (a release is idempotent) so nothing is left running. Likewise a cancel
while a resume's restore runs: it was taken for a failed restore (`worker_lost`, the
record scored); now it ends `cancelled`, unscored.

Deterministic: the release stand-in blocks on a gate the test holds; the cancel is
sent while it blocks, the gate opens only once the workflow has answered the cancel
(its history asks the release to cancel). Stand-in activities on the time-skipping
test server: on the old code the parked day passes in skipped time, the episode
resumes and ends `max_turns` (or `idle_timeout`), not `cancelled`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from episodes import contract
from episodes.types.io import (
    DriveInput,
    DriveResult,
    EpisodeProgress,
    ProvisionInput,
    ReleaseInput,
    RestoreInput,
    RestoreResult,
)
from episodes.types.results import EpisodeResult, ScoreResult
from tests.support.helpers import wait_until
from tests.workflows import test_episode, test_interactive
from tests.workflows.standins import StandIns, spec, turn_result

DAY = 86400.0  # the default max_parked_s


class ReleaseGated(StandIns):
    """The first `gated` activity (the park's release, or the resume's restore) blocks
    until the test opens the gate; the drive waits for its own gate, then records turn
    by turn and pauses when asked to."""

    def __init__(self, client: Any, gated: str = "release") -> None:
        super().__init__(client)
        self.gated = gated
        self.release_gate = asyncio.Event()
        self.drive_gate = asyncio.Event()

    async def _gate(self, name: str) -> None:
        if name == self.gated and self.calls[name] == 1:
            await self.release_gate.wait()

    @activity.defn(name=contract.RELEASE)
    async def release(self, inp: ReleaseInput) -> None:
        self._call("release", inp)
        await self._gate("release")
        self.released.set()

    @activity.defn(name=contract.RESTORE)
    async def restore(self, inp: RestoreInput) -> RestoreResult:
        self._call("restore", inp)
        await self._gate("restore")
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

    async def on_drive(self, inp: DriveInput) -> DriveResult:
        await self.drive_gate.wait()
        for n in range(inp.first_turn, inp.max_turns):
            if not await self.record(inp, [turn_result(n)]) and n + 1 < inp.max_turns:
                return DriveResult(next_turn=n + 1)  # paused: parked next
        return DriveResult(
            termination="max_turns", next_turn=inp.max_turns, score=ScoreResult(reward=1.0)
        )


async def _cancel_while_parking(
    s: ReleaseGated, handle: WorkflowHandle[Any, EpisodeResult]
) -> EpisodeResult:
    """Cancel while the gated activity blocks; open the gate once the workflow has
    answered the cancel; the result, which must come without the parked day passing."""
    await s.started(s.gated)
    await handle.cancel()

    async def cancel_answered() -> bool:
        history = await handle.fetch_history()
        return any(
            e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED
            for e in history.events
        )

    assert await wait_until(cancel_answered, timeout=60)
    s.release_gate.set()
    return await asyncio.wait_for(handle.result(), 120)


async def test_a_cancel_while_an_episode_parks_ends_it_cancelled_and_released(
    own_env: WorkflowEnvironment,
) -> None:
    s = ReleaseGated(own_env.client)
    try:
        async with s.running():
            handle = await test_episode.start(own_env, s, spec=spec(max_turns=50))
            await s.started("drive")
            await handle.signal(contract.PARK)
            s.drive_gate.set()
            result = await _cancel_while_parking(s, handle)
    finally:
        s.release_gate.set()
    assert (result.termination, result.error) == ("cancelled", "the episode was cancelled")
    assert result.duration_s < DAY and result.turns < 50
    # Never brought back; the session released again after the cancel (nothing leaked).
    assert (s.calls["restore"], s.calls["drive"], s.calls["score"]) == (0, 1, 0)
    assert s.calls["release"] == 2
    assert len({r.session_id for r in s.inputs["release"]}) == 1


async def test_a_cancel_while_an_interactive_session_parks_ends_it_cancelled_and_released(
    own_env: WorkflowEnvironment,
) -> None:
    s = ReleaseGated(own_env.client)
    try:
        async with s.running():
            handle = await test_interactive.start(own_env, s, idle_timeout_s=7 * DAY)
            await test_interactive.open_(handle)
            assert (await test_interactive.step(handle, 0, "hi")).reply == "r0"
            await handle.signal(contract.PARK)
            result = await _cancel_while_parking(s, handle)
    finally:
        s.release_gate.set()
    assert (result.termination, result.error) == ("cancelled", "the session was cancelled")
    assert result.duration_s < DAY and result.turns == 1
    assert (s.calls["restore"], s.calls["score"]) == (0, 0)
    assert s.calls["release"] == 2
    assert len({r.session_id for r in s.inputs["release"]}) == 1


async def test_a_cancel_while_a_parked_episode_resumes_ends_it_cancelled(
    own_env: WorkflowEnvironment,
) -> None:
    """Not `worker_lost` (a restore that failed), nor scored: the trainer cancelled it."""
    s = ReleaseGated(own_env.client, gated="restore")
    try:
        async with s.running():
            handle = await test_episode.start(own_env, s, spec=spec(max_turns=50))
            await s.started("drive")
            await handle.signal(contract.PARK)
            s.drive_gate.set()

            async def parked() -> bool:
                p = await handle.query(contract.PROGRESS, result_type=EpisodeProgress)
                return p.status == "parked"

            assert await wait_until(parked, timeout=60)
            await handle.signal(contract.RESUME)
            result = await _cancel_while_parking(s, handle)
    finally:
        s.release_gate.set()
    assert (result.termination, result.error) == ("cancelled", "the episode was cancelled")
    assert result.duration_s < DAY and result.turns < 50
    assert (s.calls["score"], s.calls["score_transcript"], s.calls["drive"]) == (0, 0, 1)
    # The park's release; the restored session (if its worker finishes it) is stopped by
    # that worker's reaper once the workflow has closed, as a cancelled provision's.
    assert (s.calls["restore"], s.calls["release"]) == (1, 1)
