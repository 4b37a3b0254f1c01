"""One episode's live state on a worker: box + harness process + environment + transcript.

Temporal-free. The activities (`provision`, `turn`, `score`, `release`), the turn loop
(`episodes.session.drive`) and the in-process runner (`episodes.local`) are thin
wrappers over this class.

Exactly-once turns: each turn runs as a task owned by the session, not by the
caller. A caller that is cancelled or retried (a Temporal activity attempt after a
heartbeat timeout) awaits the same task, or gets the recorded result, so the
message reaches the harness once however often the turn is asked for.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any

from episodes.envs.base import EnvCalls, Environment, call, score_transcript, step_turn
from episodes.errors import BoxLost, EnvironmentFailed, SpecError, TurnOutOfOrder
from episodes.harness.budget import StreamBudget
from episodes.harness.driver import EventCallback, HarnessDriver, make_driver
from episodes.runtimes import Runtime
from episodes.runtimes.box import Box
from episodes.runtimes.caps import BoxCaps
from episodes.secret_values import Scrubber, resolve_secrets
from episodes.session.launch import (
    harness_argv,
    harness_env,
    open_box,
    upstream_key,
)
from episodes.session.restore import restore_session
from episodes.session.services import AgentServices
from episodes.session.verdict import disarm, ended
from episodes.traces import Span, provision_span, score_span, turn_span
from episodes.truncate import fit_result
from episodes.types.results import (
    ScoreResult,
    StepOutcome,
    Task,
    Termination,
    Transcript,
    TurnRecord,
    TurnResult,
)
from episodes.types.runtime import RuntimeConfig
from episodes.types.spec import EpisodeSpec

if TYPE_CHECKING:
    from episodes.runtimes.pool.runtime_pool import RuntimePool
    from episodes.runtimes.pool.warm import WarmBoxes


# "No message given": the env's pending message is sent (None is a valid message).
_PENDING: Any = object()


class LiveSession:
    def __init__(
        self,
        spec: EpisodeSpec,
        task: Task,
        sample: int,
        session_id: str,
        *,
        pool: RuntimePool | None = None,
        warm: WarmBoxes | None = None,
        caps: BoxCaps | None = None,
        on_box_wait: Callable[[], None] | None = None,
        box_wait_s: float | None = None,
        labels: dict[str, str] | None = None,
        history_limit_bytes: int | None = None,
    ) -> None:
        """`history_limit_bytes`: the most one turn may take in the history when it is
        recorded whole (no external storage); None: no limit (storage on, or no history).
        `caps`: the worker's caps on its boxes; past them the box waits (`box_waiting`,
        and `on_box_wait()` once), at most `box_wait_s` (episodes/runtimes/caps.py)."""
        self.spec = spec
        self.task = task
        self.sample = sample
        self.session_id = session_id
        self.labels = {"session": session_id, **(labels or {})}
        self._pool = pool
        self._warm = warm
        self._caps = caps
        self._on_box_wait = on_box_wait
        self._box_wait_s = box_wait_s
        # True while the box waits for room under the worker's caps.
        self.box_waiting = False
        self.history_limit_bytes = history_limit_bytes
        # Known secret values (the spec's secrets, the model's upstream key), set by open():
        # scrubbed from every record, error and stderr tail the episode keeps.
        self.scrubber = Scrubber()
        # Holds the box (a pool lease or a runtime of our own) until close().
        self._box = AsyncExitStack()
        self.pool_hit: bool | None = None
        self.runtime: Runtime | None = None
        # Where the box runs: the type of the spec's runtime it got (a spillover one
        # when the first had no room).
        self.runtime_type: str | None = None
        self.harness: HarnessDriver | None = None
        self.services: AgentServices | None = None  # the env's tools, the model proxy
        self.env: Environment | None = None
        # Every call into the env (and its sync tools) goes through here: sync code on
        # the env threads, one call at a time (episodes/envs/base.py).
        self.env_calls = EnvCalls()
        self.first_message: Any = None
        self._pending: Any = None
        self._results: dict[int, TurnResult] = {}
        # A turn whose task raised (an event callback, a bug): a retry re-raises the
        # same error instead of being refused as out of order.
        self._failed: dict[int, BaseException] = {}
        self._inflight: dict[int, asyncio.Task[TurnResult]] = {}
        self._next_turn = 0
        self._finished = False
        self._closed = False
        self.last_used = time.monotonic()
        # What the harness may stream (spec.harness.limits), shared by its driver and the
        # services; a breach the services see stops the harness (`_stop_harness`).
        self.budget = StreamBudget(spec.harness.limits)
        self._stopping: asyncio.Future[None] | None = None

    # -- lifecycle -----------------------------------------------------------------

    async def open(self) -> Any:
        """Start the box and the harness, wait for ready, reset the env: the first message."""
        with provision_span(self.session_id) as span:
            first = await self._open(span)
            span.set("episodes.pool_hit", self.pool_hit)
            return first

    async def _open(self, span: Span) -> Any:
        from episodes.envs import load_env

        env = load_env(self.spec.env, self.spec.env_args)
        try:
            secrets = resolve_secrets(self.spec)
            self.scrubber = Scrubber([*secrets.values(), upstream_key(self.spec)])

            async def prepare(config: RuntimeConfig) -> RuntimeConfig:
                try:
                    # The env may say what box its task needs (a Harbor task's image).
                    chosen: RuntimeConfig = await self.env_calls(env.box_config, self.task, config)
                    return chosen
                except SpecError:
                    raise
                except Exception as e:
                    raise EnvironmentFailed("box_config", e) from e

            def waiting() -> None:
                self.box_waiting = True
                if self._on_box_wait is not None:
                    self._on_box_wait()

            try:
                self.runtime, self.pool_hit, config = await open_box(
                    self._box,
                    self.spec,
                    self.task,
                    self.sample,
                    self.labels,
                    prepare=prepare,
                    pool=self._pool,
                    warm=self._warm,
                    caps=self._caps,
                    on_wait=waiting,
                    max_wait_s=self._box_wait_s,
                )
            finally:
                self.box_waiting = False
            self.runtime_type = config.type
            env.box = Box(self.runtime)
            span.event("box started")
            try:
                tools = self.env_calls.tools(env.tools())
            except Exception as e:
                raise EnvironmentFailed("tools", e) from e
            # Before the harness: it gets their addresses and may use them at start.
            self.services = AgentServices(
                tools,
                self.spec.model,
                session_id=self.session_id,
                budget=self.budget,
                on_breach=self._stop_harness,
            )
            extra = await self.services.start(self.runtime)
            bridge = self.services.bridge
            self.harness = make_driver(
                self.spec,
                self.runtime,
                harness_argv(self.spec, self.runtime),
                {**harness_env(self.spec, secrets), **extra},
                mcp_url=self.services.mcp_url,
                mcp_token=bridge.token if bridge else None,
                budget=self.budget,
            )
            await self.harness.start()
            span.event("harness ready")
            self.env = env
            try:
                self.first_message = await self.env_calls(env.reset, self.task)
            except Exception as e:
                raise EnvironmentFailed("reset", e) from e
        except BaseException as e:
            await self.close(failed=True)
            raise e
        self._pending = self.first_message
        self.last_used = time.monotonic()
        return self.first_message

    def _stop_harness(self) -> None:
        """Stop the harness now (a turn in progress ends as it exits); the turn's record
        then says why (`services.breach`)."""
        if self.harness is not None and self._stopping is None:
            self._stopping = asyncio.ensure_future(self.harness.stop())

    def scrub_error(self, e: BaseException) -> str:
        """An exception's message with known secrets masked: what may leave the worker."""
        return self.scrubber.text(str(e))

    async def close(self, *, failed: bool = False) -> None:
        """Stop the harness and release the box. Idempotent; finishes even if cancelled."""
        if self._closed:
            return
        self._closed = True
        await asyncio.shield(self._close(failed))

    async def _close(self, failed: bool) -> None:
        for task in self._inflight.values():
            task.cancel()
        if self.harness is not None:
            with contextlib.suppress(Exception):
                await self.harness.stop()
        if self.services is not None:
            with contextlib.suppress(Exception):
                await self.services.stop()
        # A harness that failed may have left the box in any state: never park it.
        broken = (
            failed or bool(self._failed) or any(r.record.error_type for r in self._results.values())
        )
        exc = RuntimeError("session failed") if broken else None
        with contextlib.suppress(Exception):
            # A pool lease parks the box on a clean exit and stops it on an error.
            await self._box.__aexit__(type(exc) if exc else None, exc, None)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def busy(self) -> bool:
        """A turn is running (for a drive, a step or a run-ahead): the session is in use
        however long ago it was last touched."""
        return bool(self._inflight)

    # -- turns ---------------------------------------------------------------------

    async def turn(
        self, n: int, *, on_event: EventCallback | None = None, message: Any = _PENDING
    ) -> TurnResult:
        """Send the pending message as turn `n` once; repeat calls get the same result.

        `message`, when given, is sent instead of the env's pending message (an
        interactive session, where the trainer writes each turn).
        """
        self.last_used = time.monotonic()
        if n in self._results:
            return self._results[n]
        if n in self._failed:
            raise self._failed[n]
        task = self._inflight.get(n)
        if task is None:
            if self._closed:
                raise TurnOutOfOrder(f"session {self.session_id} is closed")
            if self._finished:
                raise TurnOutOfOrder(f"turn {n} asked for after the episode ended")
            if n != self._next_turn:
                raise TurnOutOfOrder(f"turn {n} asked for, next is {self._next_turn}")
            self._next_turn += 1
            if message is not _PENDING:
                self._pending = message
            task = asyncio.create_task(self._run_turn(n, on_event))
            self._inflight[n] = task
        # Shielded: a cancelled caller must not cancel the turn the harness is working on.
        return await asyncio.shield(task)

    async def _run_turn(self, n: int, on_event: EventCallback | None) -> TurnResult:
        with turn_span(self.session_id, n) as span:
            result = await self._turn_traced(n, on_event, span)
            span.set("episodes.termination", result.termination)
            span.set("episodes.error_type", result.record.error_type)
            return result

    async def _turn_traced(self, n: int, on_event: EventCallback | None, span: Span) -> TurnResult:
        assert self.harness is not None and self.env is not None and self.services
        try:
            # The harness's events and the calls it makes to the tools and the model, in
            # the order they happened.
            events: list[Any] = []

            async def harness_event(event: Any) -> None:
                disarm(event)
                events.append(event)
                if on_event is not None:
                    await call(on_event, event)

            self.services.begin_turn(events)
            self.services.trace = span
            try:
                if self.services.breach is None:
                    record: TurnRecord = await self.harness.turn(
                        n, self._pending, timeout_s=self.turn_timeout_s, on_event=harness_event
                    )
                else:  # broken between turns: the harness is stopped, nothing to send it
                    record = TurnRecord(turn=n, message=self._pending)
            finally:
                model_failure = self.services.end_turn()
            if record.error_type == BoxLost.error_type:
                # The box died under the turn, not by the harness's doing: the turn is
                # not recorded; the episode goes on in a fresh box (a failover).
                raise BoxLost(record.error or "the box was lost")
            # Events the driver recorded without passing them on (ACP's permission
            # decisions); by identity, in one pass: a turn may stream thousands.
            seen = {id(e) for e in events}
            extra = [disarm(e) for e in record.events if id(e) not in seen]
            record = record.model_copy(update={"events": events + extra})
            result = ended(n, record, self.services.breach, model_failure)
            if result is None:
                # A reply, or an `error` packet (that turn failed, the harness runs on):
                # the env says what comes next.
                result = await self._step_env(record, record.reply)
            result = fit_result(
                self.scrubber.model(result),
                mode=self.spec.record,
                max_value_bytes=self.spec.record_max_value_bytes,
                max_turn_bytes=self.spec.record_max_turn_bytes,
                history_limit_bytes=self.history_limit_bytes,
                where=f"session {self.session_id} turn {n}",
            )
            if result.observation.done:
                self._finished = True
            self._results[n] = result
            return result
        except Exception as e:
            self._failed[n] = e
            raise
        finally:
            self._inflight.pop(n, None)
            self.last_used = time.monotonic()

    async def _step_env(self, record: TurnRecord, reply: Any) -> TurnResult:
        """The env's verdict on a turn (`step_turn`); an env that raises ends the episode
        `env_error`, one that declines a harness's error ends it `harness_error`."""
        assert self.env is not None
        try:
            outcome = await step_turn(self.env, record, reply, self.env_calls, self.scrubber.text)
        except EnvironmentFailed as failure:
            return TurnResult(
                record=record.model_copy(update={"error": str(failure)}),
                observation=StepOutcome(done=True),
                termination="env_error",
            )
        if outcome is None:
            return TurnResult(
                record=record, observation=StepOutcome(done=True), termination="harness_error"
            )
        self._pending = outcome.message
        return TurnResult(
            record=record,
            observation=outcome,
            termination="env_done" if outcome.done else None,
        )

    async def restore(self, records: list[TurnRecord]) -> tuple[list[int], bool]:
        """After open(): bring this fresh harness and env to where a lost session was
        (`episodes.session.restore.restore_session`): the divergent turns, and whether
        it resumed."""
        with provision_span(self.session_id, restore=True) as span:
            divergent, resumed = await restore_session(self, records)
            span.set("episodes.turns_replayed", len(records))
            span.set("episodes.replay_divergences", len(divergent))
            return divergent, resumed

    @property
    def next_turn(self) -> int:
        """The index the next new turn must carry."""
        return self._next_turn

    def adopt(self, result: TurnResult) -> None:
        """Take a turn that ran before this session existed (a restore's replay of the
        record) as this session's next turn: kept for repeat calls, and its observation's
        message is what the next turn sends. The caller stepped the env on it."""
        n = result.record.turn
        if n != self._next_turn or self._inflight:
            raise TurnOutOfOrder(f"recorded turn {n} restored, next is {self._next_turn}")
        if result.record.error_type is None or not result.observation.done:
            self._pending = result.observation.message  # a failed turn the env went on from
        self._results[n] = result
        self._next_turn += 1
        self.last_used = time.monotonic()

    def transcript(
        self, termination: Termination | None = None, error: str | None = None
    ) -> Transcript:
        return Transcript(
            task=self.task,
            first_message=self.first_message,
            turns=[self._results[i].record for i in sorted(self._results)],
            termination=termination,
            error=error,
        )

    @property
    def turn_timeout_s(self) -> float:
        """The spec's turn timeout, or the env's for this episode when shorter (a Harbor
        task's agent timeout; the workflow's backstop is the spec's)."""
        own = getattr(self.env, "turn_timeout_s", None)
        return min(own, self.spec.turn_timeout_s) if own else self.spec.turn_timeout_s

    async def score(self, termination: Termination | None = None) -> ScoreResult:
        """The env's score; its box commands end within `score_timeout_s`. An env that
        raises (its box gone, its rubric broken) raises EnvironmentFailed: `env_error`."""
        assert self.env is not None
        self.last_used = time.monotonic()
        # Box commands stop at 80% of score_timeout_s: the env still has time to grade
        # what a killed command left (a timed-out test run) before the score itself is
        # late (the drive bounds the whole score by score_timeout_s: score_ended).
        with (
            score_span(self.session_id) as span,
            self.env.box.deadline_in(self.spec.score_timeout_s * 0.8),
        ):
            score = await score_transcript(self.env, self.transcript(termination), self.env_calls)
            span.set("episodes.reward", score.reward)
            span.set("episodes.termination", termination)
            return score
