"""The one turn loop of an episode: what happens next, for durable and in-process runs alike.

Turn until the env is done, `max_turns`, or the sink asks to pause; then either run
ahead (paused: the next run's drive takes over) or score (within `score_timeout_s`;
an env that fails or overruns it ends `env_error`) and release. The `drive`
activity (`activities/session.py`) runs it with a `TurnRecorder` as its sink (turns
recorded in the workflow with Updates, the workflow's pause asked through them); the
in-process runner (`episodes.local`) with a `MemorySink`. One loop, so the bench
compares like with like and a fix to the loop reaches both.

Temporal-free: the activity maps what this raises (`TurnOutOfOrder`) to its failures.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

from episodes.errors import EnvironmentFailed
from episodes.session.live import LiveSession
from episodes.types.io import DriveResult
from episodes.types.results import ScoreResult, Termination, TurnResult

log = logging.getLogger("episodes.session.drive")


class TurnSink(Protocol):
    """Where the loop's finished turns go, and its brake."""

    @property
    def stop(self) -> bool:
        """The owner asked the loop to pause (the workflow wants to continue-as-new)."""
        ...

    def add(self, result: TurnResult, *, send: bool = True) -> None:
        """A finished turn, in order; `send` False: the loop's result will carry it."""
        ...

    async def wait_until_within(self, limit: int, lag_s: float = 0.0) -> None:
        """Hold the loop while more than `limit` finished turns are unrecorded (or the
        oldest of them is `lag_s` old); `limit` 0: until every one is recorded."""
        ...

    async def finish(self) -> list[TurnResult]:
        """The loop is ending: the finished turns not recorded, for its result."""
        ...


class MemorySink:
    """The in-process run's sink: a turn is recorded when it is added; it never pauses."""

    stop = False

    def __init__(self) -> None:
        self.turns: list[TurnResult] = []

    def add(self, result: TurnResult, *, send: bool = True) -> None:
        self.turns.append(result)

    async def wait_until_within(self, limit: int, lag_s: float = 0.0) -> None:
        return None

    async def finish(self) -> list[TurnResult]:
        return []


class TurnLoop:
    """One drive of one session, from `first_turn`. `next_turn` is the turn in progress
    (or, once the turns are over, the count of them): what a heartbeat reports."""

    def __init__(
        self,
        session: LiveSession,
        sink: TurnSink,
        *,
        max_turns: int,
        first_turn: int = 0,
        pipeline: int = 0,
        max_lag_s: float = 0.0,
        result_turns: bool = True,
    ) -> None:
        """`pipeline`, `max_lag_s`: how far the sink may trail the harness (DriveInput).
        `result_turns`: the result carries the last unrecorded turns; False: every turn
        is recorded by the sink before the loop returns (histories from before it)."""
        self.session = session
        self.sink = sink
        self.max_turns = max_turns
        self.next_turn = first_turn
        self.pipeline = pipeline
        self.max_lag_s = max_lag_s
        self.result_turns = result_turns

    # Hooks for the adapter (log context, metrics); no-ops here.
    def starting(self, n: int) -> None:
        """Turn `n` is about to be asked for."""

    def finished(self, result: TurnResult) -> None:
        """A turn finished (before the sink gets it)."""

    async def run(
        self,
        *,
        release: Callable[[DriveResult], Awaitable[None]] | None = None,
        ahead: RunAhead | None = None,
    ) -> DriveResult:
        """Turn, then: paused (termination None) -> run `ahead`; over -> score and
        `release` (the result says `released`). Raises what `session.turn` raises."""
        termination: Termination | None = None
        error: str | None = None
        while self.next_turn < self.max_turns:
            self.starting(self.next_turn)
            result = await self.session.turn(self.next_turn)
            self.finished(result)
            self.next_turn += 1
            last = result.observation.done or self.next_turn >= self.max_turns
            in_result = last and self.result_turns
            self.sink.add(result, send=not in_result)
            if not in_result:
                await self.sink.wait_until_within(self.pipeline, self.max_lag_s)
            if result.observation.done:
                termination, error = result.termination or "env_done", result.record.error
                break
            if self.sink.stop and self.next_turn < self.max_turns:
                break  # paused: the next run drives on from `next_turn`
        else:
            termination = "max_turns"
        if not self.result_turns:
            await self.sink.wait_until_within(0)
        tail = await self.sink.finish()
        if termination is None:
            if ahead is not None:
                ahead.start(self.session, self.next_turn, self)
            return DriveResult(next_turn=self.next_turn, turns=tail)
        score, termination, error = await score_ended(self.session, termination, error)
        ended = DriveResult(
            termination=termination, error=error, next_turn=self.next_turn, score=score, turns=tail
        )
        if release is not None:
            ended.released = True
            await release(ended)
        return ended


async def score_ended(
    session: LiveSession, termination: Termination, error: str | None
) -> tuple[ScoreResult, Termination, str | None]:
    """The env's score of an ended episode, within the spec's `score_timeout_s`; an env
    that raises or runs past it ends the episode `env_error` (the reason in the
    score's details too), and is not scored again."""
    timeout = session.spec.score_timeout_s
    try:
        # Hazard: a sync score runs on a thread, which cannot be stopped: on timeout
        # it is abandoned to finish there, holding the env's lock so nothing else runs
        # on this env meanwhile (EnvCalls). An async one is cancelled.
        return await asyncio.wait_for(session.score(termination), timeout), termination, error
    except TimeoutError:
        why = f"score timed out after {timeout:g} s"
    except EnvironmentFailed as e:
        why = session.scrub_error(e)
    log.info("score of %s failed: %s", session.session_id, why.splitlines()[0])
    return ScoreResult(details={"error": why}), "env_error", why


class RunAhead:
    """Sessions turning on between a paused drive and the next run's drive."""

    def __init__(self) -> None:
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def start(self, session: LiveSession, first: int, loop: TurnLoop) -> None:
        """A paused drive (the workflow continues-as-new): keep turning while the next
        run starts its drive, within the drive's own bounds (`pipeline` turns,
        `max_lag_s`), so the harness does not wait on the boundary. The next drive
        gets these turns from the session's record (exactly once, as a retried drive
        does) and records them; a release or a lost worker drops them unrecorded, like
        any turn not yet recorded."""
        last = min(loop.max_turns, first + loop.pipeline)
        max_lag_s = loop.max_lag_s

        async def turn_on() -> None:
            deadline = time.monotonic() + max_lag_s
            n = first
            while n < last and time.monotonic() < deadline:
                result = await session.turn(n)
                n += 1
                if result.observation.done:
                    return

        task = asyncio.create_task(turn_on())
        self._tasks[session.session_id] = task

        def done(t: asyncio.Task[None]) -> None:
            if self._tasks.get(session.session_id) is t:
                del self._tasks[session.session_id]
            if not t.cancelled() and t.exception() is not None:
                # The next drive meets the same failure from the session's record.
                log.info("run-ahead of %s stopped: %s", session.session_id, t.exception())

        task.add_done_callback(done)

    def stop(self, session_id: str) -> None:
        task = self._tasks.pop(session_id, None)
        if task is not None:
            task.cancel()  # a turn in flight goes on: the session owns it
