"""One spec as an OpenEnv `Environment`: each OpenEnv session is a durable interactive
episode (`episodes.client.interactive`) in which the trainer is the policy.

- `reset(task_id=, seed=, episode_id=)` opens a session (provision, the env's first
  message) on a task of the spec: `task_id` names it, else `seed` picks one, else the
  next in turn. A given `episode_id` is the session's workflow id: a running session
  under it is re-attached (the observation is where it was: the last step's `turn`
  and the env message after it), an unknown one is opened under that id, an ended
  one answers `done` with its result.
- `step(EpisodeAction(message=...))` is one turn, delivered once: one `step` Update
  whose update id is its idempotency key. `metadata={"turn": n}` names the turn the
  trainer means: a retry of a step already taken answers its recorded reply.
- The last step (`done`) scores the session; its observation's reward is the scored
  episode's reward.

How a connection ends (closed: end and score; dropped: park) is the server's
(`episodes.integrations.openenv.server`); it finds the environment of a connection
through `current_connection`, which the server sets and `reset`/`step` fill in.
OpenEnv calls `reset_async`/`step_async`, which run on the server's event loop with
the Temporal client; the sync `reset`/`step` refuse.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
from pydantic import Field

from episodes.client import EpisodesClient
from episodes.client.interactive import InteractiveSession, attach_session
from episodes.errors import SpecError, StepRejected
from episodes.types.results import EpisodeResult, Task, Termination
from episodes.types.spec import EpisodeSpec
from episodes.types.tuning import DEFAULT_IDLE_TIMEOUT_S


class EpisodeAction(Action):
    """One turn of the trainer: `message` goes to the live harness as the turn's message."""

    message: Any = Field(default=None, description="The trainer's message for this turn")


class EpisodeObservation(Observation):
    """What the session answers a reset or a step with (`done` and `reward` are OpenEnv's:
    the last step's reward is the scored episode's)."""

    message: Any = Field(
        default=None, description="The env's message to act on next (None once done)"
    )
    reply: Any = Field(default=None, description="The harness's reply to this step's message")
    turn: int | None = Field(
        default=None,
        description="The index of the last step the session took (None before its first)",
    )
    termination: Termination | None = Field(default=None, description="Why it ended, once done")
    error: str | None = Field(default=None, description="What went wrong, if anything")
    workflow_id: str = Field(
        default="", description="The session's workflow id: its episode_id, in Temporal"
    )


@dataclass(eq=False)
class Connection:
    """One `/ws` connection as the server sees it: the environment OpenEnv made for it,
    and whether the client ended it (OpenEnv's `close` message or a normal closure)."""

    env: DurableEpisodeEnv | None = None
    closed_by_client: bool = False


# Set by the server around each `/ws` connection; None for the stateless HTTP routes.
current_connection: ContextVar[Connection | None] = ContextVar("openenv_connection", default=None)


class SpecSessions:
    """What the environments of one server share: the client, the spec and its tasks,
    the batch its sessions belong to, and which connection holds which session."""

    def __init__(
        self,
        episodes: EpisodesClient,
        spec: EpisodeSpec,
        *,
        batch: str,
        idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
    ) -> None:
        self.episodes = episodes
        self.spec = spec
        self.batch = batch
        self.idle_timeout_s = idle_timeout_s
        self.tasks = spec.load_tasks()
        if not self.tasks:
            raise SpecError(f"spec {spec.name} has no tasks")
        self._by_id = {t.id: t for t in self.tasks}
        self._turn = itertools.cycle(self.tasks)
        self._samples: dict[str, itertools.count[int]] = defaultdict(itertools.count)
        self._holders: dict[str, Connection] = {}

    def task(self, task_id: str | None, seed: int | None) -> Task:
        """`task_id`'s task, else the one `seed` picks, else the next in turn."""
        if task_id is not None:
            if task_id not in self._by_id:
                shown = ", ".join(list(self._by_id)[:10])
                raise StepRejected(f"reset: no task {task_id!r} in spec {self.spec.name} ({shown})")
            return self._by_id[task_id]
        if seed is not None:
            return self.tasks[seed % len(self.tasks)]
        return next(self._turn)

    async def open(self, task: Task, workflow_id: str | None) -> InteractiveSession:
        """A new session on `task` (the next sample of it in the batch, or `workflow_id`)."""
        return await self.episodes.open_session(
            self.spec,
            task,
            next(self._samples[task.id]),
            batch_id=self.batch,
            idle_timeout_s=self.idle_timeout_s,
            workflow_id=workflow_id,
        )

    async def attach(self, workflow_id: str) -> InteractiveSession | None:
        return await attach_session(self.episodes.client, workflow_id)

    def hold(self, session: InteractiveSession, connection: Connection | None) -> None:
        """`connection` now holds `session`: its end decides the session's (the latest
        connection to re-attach wins; the stateless HTTP routes hold nothing)."""
        if connection is not None:
            self._holders[session.workflow_id] = connection

    def let_go(self, session: InteractiveSession, connection: Connection | None) -> bool:
        """Whether `connection` held `session` (it holds it no more)."""
        if connection is None or self._holders.get(session.workflow_id) is not connection:
            return False
        del self._holders[session.workflow_id]
        return True


class DurableEpisodeEnv(Environment[EpisodeAction, EpisodeObservation, State]):
    """An OpenEnv environment whose episodes are durable interactive sessions of one spec.
    OpenEnv's server makes one per `/ws` connection (and one per stateless HTTP call)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, sessions: SpecSessions) -> None:
        super().__init__()
        self.sessions = sessions
        self.session: InteractiveSession | None = None

    async def reset_async(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        task_id: str | None = None,
    ) -> EpisodeObservation:
        connection = self._connection()
        previous = self.session
        if previous is not None and previous.workflow_id != episode_id:
            # A new episode on this connection: the one before it ends and is scored.
            await self.end(previous, connection, closed=True)
        session = await self.sessions.attach(episode_id) if episode_id else None
        if session is None:
            task = self.sessions.task(task_id, seed)
            session = await self.sessions.open(task, episode_id)
        self.session = session
        if session.done:
            result = await session.close()
            return _ended(session, result)
        self.sessions.hold(session, connection)
        last = session.last
        turn = session.turn - 1 if session.turn else None
        if last is not None:
            message = last.observation
        else:
            message = session.first_observation if turn is None else None
        return EpisodeObservation(message=message, turn=turn, workflow_id=session.workflow_id)

    async def step_async(
        self,
        action: EpisodeAction,
        timeout_s: float | None = None,
        episode_id: str | None = None,
    ) -> EpisodeObservation:
        """One turn. `episode_id` (the stateless HTTP `/step`, whose environment is new on
        every call) names the session to step."""
        connection = self._connection()
        if episode_id and (self.session is None or self.session.workflow_id != episode_id):
            attached = await self.sessions.attach(episode_id)
            if attached is None:
                raise StepRejected(f"step: no session {episode_id!r}")
            self.session = attached
            self.sessions.hold(attached, connection)
        session = self.session
        if session is None:
            raise StepRejected(
                "step before reset: reset() opens a session, reset(episode_id=...) "
                "re-attaches to one (over HTTP, send the episode_id with each step)"
            )
        wanted = action.metadata.get("turn")
        if wanted is not None and (not isinstance(wanted, int) or wanted > session.turn):
            raise StepRejected(f"step: metadata turn {wanted!r}: the next step is {session.turn}")
        if wanted is not None and wanted < session.turn:
            recorded = await session.recorded(wanted)
            if recorded is None:
                raise StepRejected(f"step {wanted}: the session no longer keeps its reply")
            reply = recorded
        else:
            reply = await session.step(action.message)
        reward = reply.reward
        if reply.done:
            result = await session.close()  # scored once the session ended
            reward = result.reward
            self.sessions.let_go(session, connection)
        return EpisodeObservation(
            message=reply.observation,
            reply=reply.reply,
            turn=reply.turn,
            done=reply.done,
            reward=reward,
            termination=reply.termination,
            error=reply.error,
            workflow_id=session.workflow_id,
        )

    async def end(
        self, session: InteractiveSession, connection: Connection | None, *, closed: bool
    ) -> None:
        """`connection` is done with `session`: closed, it ends and is scored; dropped, it
        parks (until a client re-attaches, or the spec's `max_parked_s`). Nothing when
        another connection holds it now, or it is over."""
        if not self.sessions.let_go(session, connection) or session.done:
            return
        if closed:
            await session.close()
        else:
            await session.park()

    def _connection(self) -> Connection | None:
        connection = current_connection.get()
        if connection is not None:
            connection.env = self
        return connection

    @property
    def state(self) -> State:
        session = self.session
        if session is None:
            return State()
        return State(episode_id=session.workflow_id, step_count=session.turn)

    def get_metadata(self) -> EnvironmentMetadata:
        spec = self.sessions.spec
        return EnvironmentMetadata(
            name=spec.name,
            description=(
                f"durable episodes of spec {spec.name} (env {spec.env}, "
                f"{len(self.sessions.tasks)} task(s)): each session is a Temporal workflow"
            ),
        )

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> EpisodeObservation:
        raise NotImplementedError("DurableEpisodeEnv is async: OpenEnv calls reset_async")

    def step(
        self, action: EpisodeAction, timeout_s: float | None = None, **kwargs: Any
    ) -> EpisodeObservation:
        raise NotImplementedError("DurableEpisodeEnv is async: OpenEnv calls step_async")


def _ended(session: InteractiveSession, result: EpisodeResult) -> EpisodeObservation:
    """A session that is already over (re-attached after its end, or failed to start)."""
    return EpisodeObservation(
        done=True,
        reward=result.reward,
        turn=result.turns - 1 if result.turns else None,
        termination=result.termination,
        error=result.error,
        workflow_id=session.workflow_id,
    )
