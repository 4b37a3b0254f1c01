"""Parking an interactive session (issue 30), its logic against stand-in activities on
the time-skipping test server: parked hours pass in skipped time and count toward no
idle timeout; the next step, `resume` or `max_parked_s` brings the session back (a
`restore`, not a restart); a close while parked scores the record with no session."""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio.client import WorkflowHandle

from episodes import contract
from episodes.types.io import EpisodeProgress, TurnInput
from episodes.types.results import TurnResult
from tests.support.helpers import wait_until
from tests.workflows.standins import StandIns, spec, turn_result
from tests.workflows.test_interactive import close, open_, start, step


async def _status(handle: WorkflowHandle[Any, Any]) -> EpisodeProgress:
    return await handle.query(contract.PROGRESS, result_type=EpisodeProgress)


async def _park(handle: WorkflowHandle[Any, Any]) -> None:
    """Park the session and wait until it is parked (released, no session)."""
    await handle.signal(contract.PARK)

    async def parked() -> bool:
        p = await _status(handle)
        return p.status == "parked" and p.session is None

    assert await wait_until(parked, timeout=60)


async def test_parked_time_counts_toward_no_idle_timeout_and_a_step_resumes(env) -> None:
    s = StandIns(env.client)
    async with s.running():
        handle = await start(env, s, idle_timeout_s=3600)
        await open_(handle)
        assert (await step(handle, 0, "hi")).reply == "r0"
        await _park(handle)
        assert (s.calls["release"], s.calls["restore"]) == (1, 0)
        await env.sleep(5 * 3600)  # five idle timeouts, parked
        p = await _status(handle)
        assert (p.status, p.termination) == ("parked", None)
        # A re-attach while parked: still live, the first observation kept.
        opened = await open_(handle)
        assert (opened.done, opened.first_observation, opened.turns_done) == (False, "m0", 1)
        # The next step brings it back (one restore of the recorded turn), then runs.
        reply = await step(handle, 1, "again")
        assert (reply.turn, reply.reply, reply.done) == (1, "r1", False)
        result = await close(handle)
    assert [r.turns for r in s.inputs["restore"]] == [1]
    assert [t.message for t in s.inputs["turn"]] == ["hi", "again"]
    assert (result.termination, result.turns, result.reward) == ("closed", 2, 0.5)
    # Resuming is no restart; the replayed turn is counted.
    assert (result.restarts, result.turns_replayed) == (0, 1)
    assert (s.calls["release"], s.calls["score"]) == (2, 1)


async def test_resume_brings_the_session_back_before_a_step(env) -> None:
    s = StandIns(env.client)
    async with s.running():
        handle = await start(env, s)
        await open_(handle)
        await step(handle, 0)
        await _park(handle)
        await handle.signal(contract.RESUME)

        async def running() -> bool:
            p = await _status(handle)
            return p.status == "running" and p.session is not None

        assert await wait_until(running, timeout=60)
        assert s.calls["restore"] == 1
        assert (await step(handle, 1)).reply == "r1"
        result = await close(handle)
    assert (result.termination, result.turns, result.restarts) == ("closed", 2, 0)
    assert s.calls["restore"] == 1


async def test_past_max_parked_s_it_resumes_by_itself_then_idles_out(env) -> None:
    """As a parked episode does: past `max_parked_s` it resumes; then the idle clock runs
    again, and a session nobody steps ends `idle_timeout` on its restored session."""
    s = StandIns(env.client)
    async with s.running():
        handle = await start(env, s, spec=spec(max_parked_s=600), idle_timeout_s=3600)
        await open_(handle)
        await step(handle, 0)
        await _park(handle)
        result = await handle.result()
    assert (result.termination, result.turns, result.restarts) == ("idle_timeout", 1, 0)
    assert result.duration_s >= 600 + 3600
    assert s.calls["restore"] == 1
    # Scored on the restored session, which is then released (two releases in all).
    assert (result.reward, s.calls["score"], s.calls["release"]) == (0.5, 1, 2)


async def test_close_while_parked_scores_the_record_without_a_session(env) -> None:
    s = StandIns(env.client)
    async with s.running():
        handle = await start(env, s)
        await open_(handle)
        await step(handle, 0)
        await step(handle, 1)
        await _park(handle)
        result = await close(handle)
    assert (result.termination, result.turns) == ("closed", 2)
    # No session brought back: the recorded transcript is scored, nothing more released.
    assert (result.reward, result.score_details) == (0.25, {"recorded": 2})
    assert (s.calls["restore"], s.calls["score"], s.calls["release"]) == (0, 0, 1)


async def test_cancel_while_parked_ends_cancelled_with_nothing_to_release(env) -> None:
    s = StandIns(env.client)
    async with s.running():
        handle = await start(env, s)
        await open_(handle)
        await step(handle, 0)
        await _park(handle)
        await handle.cancel()
        result = await handle.result()
    assert (result.termination, result.turns) == ("cancelled", 1)
    assert (s.calls["restore"], s.calls["release"]) == (0, 1)


class Gated(StandIns):
    """Step 0's turn runs until the test opens the gate."""

    def __init__(self, client: Any) -> None:
        super().__init__(client)
        self.gate = asyncio.Event()

    async def on_turn(self, inp: TurnInput) -> TurnResult:
        if inp.turn == 0:
            await self.gate.wait()
        return turn_result(inp.turn)


async def test_park_waits_for_the_step_in_flight_and_a_resume_before_it_calls_it_off(
    env,
) -> None:
    s = Gated(env.client)
    async with s.running():
        handle = await start(env, s)
        await open_(handle)
        first = asyncio.create_task(step(handle, 0))
        await s.started("turn")
        await handle.signal(contract.PARK)  # taken once the step is done...
        await handle.signal(contract.RESUME)  # ...but called off before that
        s.gate.set()
        assert (await first).reply == "r0"
        assert (await step(handle, 1)).reply == "r1"
        await _park(handle)  # a park asked later is taken
        result = await close(handle)
    assert (result.termination, result.turns) == ("closed", 2)
    assert (s.calls["restore"], s.calls["release"]) == (0, 1)
