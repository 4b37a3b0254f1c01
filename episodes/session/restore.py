"""Restoring a lost session: a fresh harness and env brought to where the lost one was.

The `restore` activity runs this (through `LiveSession.restore`) on a new worker after
the one holding the session was lost (`on_worker_lost: restart`). It lives apart from
`episodes.session.live` because it is a path of its own, taken once per restart, not
part of the turn-by-turn life of a session; it works through the session's public
surface (`next_turn`, `adopt`), never its private state: `RestoredSession` names that
surface, so this module needs nothing from `live` (which calls it).
"""

from __future__ import annotations

from typing import Protocol

from episodes.envs.base import EnvCalls, Environment, step_turn
from episodes.errors import HarnessFailure, TurnOutOfOrder
from episodes.harness.driver import HarnessDriver
from episodes.replay import Replay
from episodes.secret_values import Scrubber
from episodes.session.services import AgentServices
from episodes.truncate import fit_result
from episodes.types.results import StepOutcome, TurnRecord, TurnResult
from episodes.types.spec import EpisodeSpec


class RestoredSession(Protocol):
    """What a restore uses of the session it restores (`LiveSession` is one): opened, so
    its harness, env and services are there."""

    spec: EpisodeSpec
    session_id: str
    harness: HarnessDriver | None
    env: Environment | None
    services: AgentServices | None
    env_calls: EnvCalls
    scrubber: Scrubber
    history_limit_bytes: int | None

    @property
    def next_turn(self) -> int: ...

    def adopt(self, result: TurnResult) -> None: ...


def _replay_failure(n: int, record: TurnRecord) -> HarnessFailure:
    """A restore whose replay broke the new harness fails like a provision would."""
    failure = HarnessFailure(f"replaying recorded turn {n}: {record.error}")
    failure.error_type = record.error_type or "harness_crashed"
    return failure


async def restore_session(
    session: RestoredSession, records: list[TurnRecord]
) -> tuple[list[int], bool]:
    """After `session.open()`: bring its fresh harness and env to where a lost session was.

    A harness whose `ready` said `resume: true` gets the recorded turns in one
    `resume` packet; any other is sent each recorded message again, in order, and
    its replies are compared with the recorded ones (the divergent turn indices are
    returned). The env always steps on the *recorded* replies (`step_error` on the
    recorded errors of the failed turns it went on from), so its state follows
    the recorded run whatever the new harness answers.

    An exact replay (episodes/replay.py): meanwhile the session's proxy answers
    the harness's model calls with the recorded ones, and its bridge the tool calls with
    the recorded results (an env with `deterministic_tools` has them run again on this
    fresh env, rebuilding its state). A call that does not match the record makes its
    turn divergent; from there on calls go live (or, `on_divergence: fail`, the restore
    fails: HarnessFailure). What the harness did outside the box, the env, the model
    and the tools (a network call of its own) happens again.
    """
    assert session.harness is not None and session.env is not None and session.services
    timeout = session.spec.turn_timeout_s
    resumed = bool(records) and bool(getattr(session.harness, "resumable", False))
    if resumed:
        transcript = [{"turn": r.turn, "message": r.message, "reply": r.reply} for r in records]
        await session.harness.resume(transcript, timeout_s=timeout)  # type: ignore[attr-defined]
    replay = Replay(
        [r.events for r in records],
        deterministic_tools=bool(getattr(session.env, "deterministic_tools", False)),
        on_divergence=session.spec.on_divergence,
    )
    if not resumed:
        session.services.replay(replay)
    try:
        divergent = await _replay_turns(session, records, replay, resumed)
    finally:
        session.services.replay(None)
    return divergent, resumed


async def _replay_turns(
    session: RestoredSession, records: list[TurnRecord], replay: Replay, resumed: bool
) -> list[int]:
    assert session.harness is not None and session.env is not None and session.services
    timeout = session.spec.turn_timeout_s
    divergent: list[int] = []
    for rec in records:
        if rec.turn != session.next_turn:
            raise TurnOutOfOrder(f"recorded turn {rec.turn} restored, next is {session.next_turn}")
        if not resumed:
            # Not recorded (the recorded turn stands): later calls must not extend these.
            session.services.begin_turn([], recorded=False)
            before = replay.divergences
            try:
                new = await session.harness.turn(rec.turn, rec.message, timeout_s=timeout)
            finally:
                session.services.end_turn()
                replay.end_turn()  # fewer calls than recorded: this turn diverged
            if replay.divergences > before and replay.fail:
                raise _diverged(rec.turn, replay)
            if new.error_type not in (None, "harness_error"):
                raise _replay_failure(rec.turn, new)
            # Compared as the history would have recorded it (scrubbed, fitted).
            new = fit_result(
                session.scrubber.model(TurnResult(record=new, observation=StepOutcome())),
                mode=session.spec.record,
                max_value_bytes=session.spec.record_max_value_bytes,
                max_turn_bytes=session.spec.record_max_turn_bytes,
                history_limit_bytes=session.history_limit_bytes,
                where=f"session {session.session_id} replay of turn {rec.turn}",
            ).record
            if replay.divergences > before or (new.reply, new.error_type) != (
                rec.reply,
                rec.error_type,
            ):
                divergent.append(rec.turn)
        observation = StepOutcome(done=True)
        if rec.error_type in (None, "harness_error"):
            # A recorded `error` the env went on from: `step_error` again, with the error.
            observation = (
                await step_turn(
                    session.env, rec, rec.reply, session.env_calls, session.scrubber.text
                )
                or observation
            )
        session.adopt(TurnResult(record=rec, observation=observation))
    return divergent


def _diverged(n: int, replay: Replay) -> HarnessFailure:
    """`on_divergence: fail`: the replay of turn `n` made a call the record does not hold."""
    failure = HarnessFailure(f"replaying recorded turn {n}: {replay.why} (on_divergence: fail)")
    failure.error_type = "harness_start_failed"
    return failure
