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
