"""Inputs and outputs of the workflow and its activities.

Pydantic and the standard library only: workflows import this module.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from episodes.models import (
    Model,
    ScoreResult,
    Task,
    Termination,
    Transcript,
    TurnRecord,
    TurnResult,
)
from episodes.spec import EpisodeSpec

DEFAULT_TASK_QUEUE = "episodes"
# A long episode continues-as-new after this many turns in one run (or earlier, when
# the server suggests it), so its history stays bounded however many turns it takes.
DEFAULT_TURNS_PER_RUN = 1000
# What the `progress` query returns by default: the last turns, within a byte budget.
DEFAULT_PROGRESS_TURNS = 100
PROGRESS_MAX_BYTES = 2 * 1024 * 1024
# Finished turns the drive may run ahead of history, and the most one Update carries:
# far below Temporal's 2 MB payload limit whatever the turns hold.
DEFAULT_PIPELINE = 256
DEFAULT_MAX_LAG_S = 1.0
DEFAULT_UPDATE_BYTES = 512 * 1024
DEFAULT_LINGER_S = 0.05


class SessionRef(Model):
    """Where a live session is: its id and the task queue of the worker holding it."""

    session_id: str
    task_queue: str
    worker_id: str
    first_message: Any = None
    pool_hit: bool | None = None


class EpisodeCarry(Model):
    """What a continued run of a long episode inherits: the live session and counters,
    not the transcript (the earlier runs' histories hold it)."""

    session: SessionRef
    turns_done: int
    started_at: datetime
    runs: int = 1
    # `on_worker_lost: restart`: restarts so far (bounded per episode, not per run) and
    # what they did; all 0 in chains recorded before restarts existed.
    restarts: int = 0
    turns_replayed: int = 0
    replay_divergences: int = 0
    turns_rerun: int = 0


class EpisodeInput(Model):
    """One episode: the spec (with just this task), the task, which sample."""

    spec: EpisodeSpec
    task: Task
    sample: int = 0
    batch: str | None = None
    turns_per_run: int = Field(default=DEFAULT_TURNS_PER_RUN, ge=1)
    # Set by continue-as-new only: the run picks up the session where the last one paused.
    carry: EpisodeCarry | None = None


class ProvisionInput(Model):
    spec: EpisodeSpec
    task: Task
    sample: int
    workflow_id: str
    run_id: str


class TurnInput(Model):
    session_id: str
    turn: int
    # Interactive sessions: the trainer's message for this turn, sent instead of the
    # env's pending one when `has_message` (a flag, since None is a valid message).
    message: Any = None
    has_message: bool = False


class DriveInput(Model):
    """The turn loop one `drive` activity runs on the session's worker."""

    session_id: str
    workflow_id: str
    run_id: str
    first_turn: int = 0
    max_turns: int
    # A turn starts only while at most `pipeline` finished turns are unrecorded and the
    # oldest of them finished less than `max_lag_s` ago: history trails the harness by
    # at most that much, and fast turns never stall on a count while an Update is in
    # flight (bench/README.md compares this bound with the alternatives).
    pipeline: int = Field(default=DEFAULT_PIPELINE, ge=0)
    max_lag_s: float = Field(default=DEFAULT_MAX_LAG_S, ge=0)
    max_update_bytes: int = Field(default=DEFAULT_UPDATE_BYTES, ge=1024)
    # An Update waits until its oldest turn is this old (fast turns share one).
    linger_s: float = Field(default=DEFAULT_LINGER_S, ge=0)
    # The folded episode end (workflows without it: the old path): the drive's result
    # carries its last unrecorded turns (no final Update), and the drive releases the
    # session itself once scored (no `release` activity on the normal path).
    result_turns: bool = False
    release: bool = False


class DriveResult(Model):
    """How the drive ended. `termination` None: the workflow paused it to continue-as-new
    (not scored); otherwise the episode is over and `score` is the env's rubric."""

    termination: Termination | None = None
    error: str | None = None
    next_turn: int
    score: ScoreResult | None = None
    turns: list[TurnResult] = Field(default_factory=list)  # unrecorded, in order
    released: bool = False  # the drive released the session


class ScoreInput(Model):
    session_id: str
    termination: Termination | None = None


class ScoreTranscriptInput(Model):
    """Scoring without the session (its worker is gone): a fresh env and the recorded turns.

    A continued run holds only its own turns: with `workflow_id`, the activity reads the
    first `earlier_turns` turns from the chain's earlier runs' histories and puts them
    before `transcript.turns` (the workflow input stays small however long the chain)."""

    env: str
    env_args: dict[str, Any] = Field(default_factory=dict)
    transcript: Transcript
    workflow_id: str | None = None
    earlier_turns: int = Field(default=0, ge=0)


class RestoreInput(Model):
    """`on_worker_lost: restart`: a new session that replays the first `turns` recorded
    turns (read from the chain's history by the activity itself)."""

    spec: EpisodeSpec
    task: Task
    sample: int
    workflow_id: str
    run_id: str
    turns: int = Field(ge=0)
    restart: int = Field(ge=1)  # 1 for the first restart of the episode


class RestoreResult(Model):
    session: SessionRef
    turns_replayed: int = 0
    # Turns whose reply on the new harness differs from the recorded one (the first few).
    divergent_turns: list[int] = Field(default_factory=list)
    divergences: int = 0
    resumed: bool = False  # the harness took the transcript in one `resume` packet


class ReleaseInput(Model):
    session_id: str


# Where an episode's workflow is in its story (the `progress` query, the UI details).
EpisodeStatus = Literal["provisioning", "running", "restoring", "scoring", "releasing", "done"]


class EpisodeProgress(Model):
    """What the `progress` query returns while an episode runs (and after)."""

    status: EpisodeStatus
    turns_done: int
    max_turns: int
    termination: Termination | None = None
    session: SessionRef | None = None
    first_message: Any = None
    # The latest turns of this run (bounded: the query's `since`/`last` and a byte
    # budget keep the answer far below gRPC's 4 MB); `first_turn` is the index of
    # turns[0] and `turns_done` counts every turn of the chain.
    turns: list[TurnRecord] = Field(default_factory=list)
    first_turn: int = 0
    runs: int = 1
    restarts: int = 0


# -- interactive sessions (the trainer writes each turn) -------------------------------

DEFAULT_IDLE_TIMEOUT_S = 600.0


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


class InteractiveCarry(EpisodeCarry):
    """A continued interactive run also keeps the last step's answer and update id: a
    trainer retrying that step after a lost response gets it from the new run."""

    last_step: StepReply | None = None
    last_step_id: str | None = None


class InteractiveInput(EpisodeInput):
    """An interactive session: an episode whose turns arrive as `step` updates."""

    idle_timeout_s: float = Field(default=DEFAULT_IDLE_TIMEOUT_S, gt=0)
    carry: InteractiveCarry | None = None
