"""Inputs and outputs of the workflow and its activities.

Pydantic and the standard library only: workflows import this module.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from episodes.models import Model, Task, Termination, Transcript, TurnRecord
from episodes.spec import EpisodeSpec

DEFAULT_TASK_QUEUE = "episodes"


class EpisodeInput(Model):
    """One episode: the spec (with just this task), the task, which sample."""

    spec: EpisodeSpec
    task: Task
    sample: int = 0
    batch: str | None = None


class ProvisionInput(Model):
    spec: EpisodeSpec
    task: Task
    sample: int
    workflow_id: str
    run_id: str


class SessionRef(Model):
    """Where a live session is: its id and the task queue of the worker holding it."""

    session_id: str
    task_queue: str
    worker_id: str
    first_message: Any = None
    pool_hit: bool | None = None


class TurnInput(Model):
    session_id: str
    turn: int
    # Interactive sessions: the trainer's message for this turn, sent instead of the
    # env's pending one when `has_message` (a flag, since None is a valid message).
    message: Any = None
    has_message: bool = False


class ScoreInput(Model):
    session_id: str
    termination: Termination | None = None


class ScoreTranscriptInput(Model):
    """Scoring without the session (its worker is gone): a fresh env and the recorded turns."""

    env: str
    env_args: dict[str, Any] = Field(default_factory=dict)
    transcript: Transcript


class ReleaseInput(Model):
    session_id: str


class EpisodeProgress(Model):
    """What the `progress` query returns while an episode runs (and after)."""

    status: Literal["provisioning", "running", "scoring", "releasing", "done"]
    turns_done: int
    max_turns: int
    termination: Termination | None = None
    session: SessionRef | None = None
    first_message: Any = None
    turns: list[TurnRecord] = Field(default_factory=list)


# -- interactive sessions (the trainer writes each turn) -------------------------------

DEFAULT_IDLE_TIMEOUT_S = 600.0


class InteractiveInput(EpisodeInput):
    """An interactive session: an episode whose turns arrive as `step` updates."""

    idle_timeout_s: float = Field(default=DEFAULT_IDLE_TIMEOUT_S, gt=0)


class SessionOpened(Model):
    """What the `open` update returns once the session is provisioned (or failed to be)."""

    first_observation: Any = None
    turns_done: int = 0
    done: bool = False
    termination: Termination | None = None
    error: str | None = None


class StepInput(Model):
    turn: int
    message: Any = None


class StepReply(Model):
    """One step: the harness's reply, the env's observation of it, and whether it is over."""

    turn: int
    reply: Any = None
    observation: Any = None  # the env's next message (usually None once done)
    done: bool = False
    reward: float | None = None
    termination: Termination | None = None  # set when done
    error: str | None = None
