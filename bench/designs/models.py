"""Inputs and outputs the prototype designs pass between workflows and activities."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from episodes.types.base import Model
from episodes.types.io import SessionRef
from episodes.types.results import ScoreResult, Task, Termination, TurnRecord
from episodes.types.spec import EpisodeSpec


class LoopInput(Model):
    """What the session-side child workflow needs to run the turn loop on its worker."""

    spec: EpisodeSpec
    task: Task
    ref: SessionRef
    parent_id: str
    # local: turns are local activities; eager: normal activities on the session queue.
    mode: Literal["local", "eager"] = "local"
    # Await the parent's acknowledgement of each turn: one workflow task per turn, so
    # every turn is in history (and visible to the parent) before the next starts.
    sync: bool = False


class LoopResult(Model):
    turns: list[TurnRecord] = Field(default_factory=list)
    termination: Termination
    error: str | None = None
    score: ScoreResult | None = None


class WatchInput(Model):
    session_id: str


class DriveInput(Model):
    """The turn loop run by an activity on the session's worker (Updates design)."""

    session_id: str
    workflow_id: str
    run_id: str
    max_turns: int
    # A turn starts only while at most this many finished turns are unrecorded:
    # 0 awaits each turn's Update; K > 0 keeps turning while Updates (batches of the
    # finished turns) are in flight.
    pipeline: int = 0
    # ... and only while the oldest unrecorded turn finished less than this long ago
    # (0: no time bound). Bounds how far history trails the harness in time.
    max_lag_s: float = 0.0
    # Wait this long after a turn finishes before sending an Update, so that fast
    # turns share one (fewer workflow tasks competing with the loop for the CPU).
    linger_ms: float = 0.0


class DriveResult(Model):
    termination: Termination
    error: str | None = None
    score: ScoreResult | None = None


class GroupInput(Model):
    """A group of episodes (one spec, several tasks) run by one activity (`group.py`)."""

    spec: EpisodeSpec
    tasks: list[Task]
