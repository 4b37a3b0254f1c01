"""Inputs, state and outputs of the workflows and their activities: episodes,
interactive sessions and batches.

Pydantic and the standard library only: workflows import this module.

A batch's input carries the tasks inline (a workflow cannot read a dataset file), and
every continue-as-new carries it again, so the whole input must fit in one Temporal
payload (2 MB by default on the server). `episodes.client.batch.server.batch_input` refuses
inputs above `MAX_INPUT_BYTES` with a clear message; for larger datasets keep the task
data small (paths or URLs the environment resolves) or split the dataset into batches.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from episodes.types.base import Model, Seconds, SecondsOrZero
from episodes.types.cost import ModelUsage
from episodes.types.metrics import BatchMetrics, MetricsAccumulator
from episodes.types.priority import BudgetName
from episodes.types.results import (
    ForkOrigin,
    ScoreResult,
    Task,
    Termination,
    Transcript,
    TurnRecord,
    TurnResult,
)
from episodes.types.spec import EpisodeSpec
from episodes.types.tuning import (
    DEFAULT_CHILDREN_PER_RUN,
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_LINGER_S,
    DEFAULT_MAX_LAG_S,
    DEFAULT_PIPELINE,
    DEFAULT_TURNS_PER_RUN,
    DEFAULT_UPDATE_BYTES,
)


class SessionRef(Model):
    """Where a live session is: its id and the task queue of the worker holding it."""

    session_id: str
    task_queue: str
    worker_id: str
    first_message: Any = None
    pool_hit: bool | None = None
    runtime: str | None = None
    """The type of the runtime the session's box runs on (one of the spec's runtimes:
    a spillover one when the first had no room); None in histories from before."""


class EpisodeCarry(Model):
    """What a continued run of a long episode inherits: the live session and counters,
    not the transcript (the earlier runs' histories hold it)."""

    session: SessionRef
    turns_done: int
    started_at: datetime
    runs: int = 1
    restarts: int = 0
    """`on_worker_lost: restart`: restarts so far (bounded per episode, not per run)
    and what they did; all 0 in chains recorded before restarts existed."""
    turns_replayed: int = 0
    replay_divergences: int = 0
    turns_rerun: int = 0
    box_failovers: int = 0
    """Box failovers so far (bounded per episode by `max_box_failovers`)."""
    model_calls: int = 0
    """The earlier runs' model calls and tokens (batch budgets count them)."""
    model_tokens: int = 0
    usage: dict[str, ModelUsage] = Field(default_factory=dict)
    """The earlier runs' model usage per model (`episodes.types.cost`)."""


class EpisodeInput(Model):
    """One episode: the spec (with just this task), the task, which sample."""

    spec: EpisodeSpec
    task: Task
    sample: int = 0
    batch: str | None = None
    turns_per_run: int = Field(default=DEFAULT_TURNS_PER_RUN, ge=1)
    carry: EpisodeCarry | None = None
    """Set by continue-as-new only: the run picks up the session where the last one
    paused."""
    fork: ForkOrigin | None = None
    """A fork's branch (`EpisodesClient.fork`): instead of a fresh session, one that
    replays the parent's first `fork.at_turn` turns exactly; it goes on live from there."""


class ProvisionInput(Model):
    spec: EpisodeSpec
    task: Task
    sample: int
    workflow_id: str
    run_id: str
    idle_timeout_s: Seconds | None = None
    """An interactive session's `idle_timeout_s`: it may sit untouched that long
    between steps, so the worker's reaper must not take it for abandoned (issue
    19)."""


class TurnInput(Model):
    session_id: str
    turn: int
    message: Any = None
    """Interactive sessions: the trainer's message for this turn, sent instead of the
    env's pending one when `has_message` (a flag, since None is a valid message)."""
    has_message: bool = False


class DriveInput(Model):
    """The turn loop one `drive` activity runs on the session's worker."""

    session_id: str
    workflow_id: str
    run_id: str
    first_turn: int = 0
    max_turns: int
    pipeline: int = Field(default=DEFAULT_PIPELINE, ge=0)
    """A turn starts only while at most `pipeline` finished turns are unrecorded and
    the oldest of them finished less than `max_lag_s` ago: history trails the
    harness by at most that much, and fast turns never stall on a count while an
    Update is in flight (bench/README.md compares this bound with the
    alternatives)."""
    max_lag_s: SecondsOrZero = DEFAULT_MAX_LAG_S
    max_update_bytes: int = Field(default=DEFAULT_UPDATE_BYTES, ge=1024)
    linger_s: SecondsOrZero = DEFAULT_LINGER_S
    """An Update waits until its oldest turn is this old (fast turns share one)."""
    result_turns: bool = False
    """The folded episode end (workflows without it: the old path): the drive's
    result carries its last unrecorded turns (no final Update), and the drive
    releases the session itself once scored (no `release` activity on the normal
    path)."""
    release: bool = False


class DriveResult(Model):
    """How the drive ended. `termination` None: the workflow paused it to continue-as-new
    (not scored); otherwise the episode is over and `score` is the env's rubric."""

    termination: Termination | None = None
    error: str | None = None
    next_turn: int
    score: ScoreResult | None = None
    turns: list[TurnResult] = Field(default_factory=list)
    """Unrecorded, in order."""
    released: bool = False
    """The drive released the session."""


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
    restart: int = Field(ge=1)
    """1 for the first restart of the episode."""
    lost: Literal["worker", "box"] = "worker"
    """What was lost: the worker holding the session, or only its box (a failover)."""
    source_workflow_id: str | None = None
    """Whose recorded turns to replay (a fork's parent); None: the episode's own."""
    idle_timeout_s: Seconds | None = None
    """As ProvisionInput's."""


class RestoreResult(Model):
    session: SessionRef
    turns_replayed: int = 0
    divergent_turns: list[int] = Field(default_factory=list)
    """Turns whose reply on the new harness differs from the recorded one (the first
    few)."""
    divergences: int = 0
    resumed: bool = False
    """The harness took the transcript in one `resume` packet."""


class ReleaseInput(Model):
    session_id: str


# Where an episode's workflow is in its story (the `progress` query, the UI details).
EpisodeStatus = Literal[
    "provisioning", "running", "restoring", "parked", "scoring", "releasing", "done"
]


class EpisodeProgress(Model):
    """What the `progress` query returns while an episode runs (and after)."""

    status: EpisodeStatus
    turns_done: int
    max_turns: int
    termination: Termination | None = None
    session: SessionRef | None = None
    first_message: Any = None
    turns: list[TurnRecord] = Field(default_factory=list)
    """The latest turns of this run (bounded: the query's `since`/`last` and a byte
    budget keep the answer far below gRPC's 4 MB); `first_turn` is the index of
    turns[0] and `turns_done` counts every turn of the chain."""
    first_turn: int = 0
    runs: int = 1
    restarts: int = 0
    park_asked: bool = False
    """A `park` was asked and not taken yet (the episode parks at its next turn
    boundary); a parked one says so in `status`."""


# -- interactive sessions (the trainer writes each turn) -------------------------------


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
    observation: Any = None
    """The env's next message (usually None once done)"""
    done: bool = False
    reward: float | None = None
    termination: Termination | None = None
    """Set when done."""
    error: str | None = None


class InteractiveCarry(EpisodeCarry):
    """A continued interactive run also keeps the last step's answer and update id: a
    trainer retrying that step after a lost response gets it from the new run."""

    last_step: StepReply | None = None
    last_step_id: str | None = None


class InteractiveInput(EpisodeInput):
    """An interactive session: an episode whose turns arrive as `step` updates."""

    idle_timeout_s: Seconds = DEFAULT_IDLE_TIMEOUT_S
    carry: InteractiveCarry | None = None


# -- batches (EvalBatchWorkflow) ----------------------------------------------------


class BatchState(Model):
    """What one run of the batch hands to the next on continue-as-new."""

    next_index: int = 0
    """Work item i is task i // samples, sample i % samples."""
    metrics: MetricsAccumulator | None = None
    runs: int = 1
    """Runs in the continue-as-new chain so far, this one included."""
    started_at: datetime | None = None
    errors: list[str] = Field(default_factory=list)
    """The last few child failures."""


class BatchInput(Model):
    spec: EpisodeSpec
    """With `tasks` inline."""
    batch: str | None = None
    """None: the batch id is the workflow id (scheduled runs get a fresh one each
    time)."""
    schedule: str | None = None
    concurrency: int | None = Field(default=None, ge=1)
    """None: spec.concurrency."""
    pass_threshold: float = 1.0
    children_per_run: int = Field(default=DEFAULT_CHILDREN_PER_RUN, ge=1)
    state: BatchState = Field(default_factory=BatchState)


BatchStatus = Literal["running", "draining", "done", "budget_exhausted"]
"""`budget_exhausted`: a budget of `spec.budget` was reached, the batch started no more
episodes (`BatchResult.budget` names it)."""


class BatchProgress(Model):
    """What the `progress` query returns."""

    status: BatchStatus
    batch: str
    total: int
    done: int
    running: int
    parked: int = 0
    """Of the `running`, the parked ones (`episodes park`): no box, `resume` goes on."""
    failed: int
    """Episodes whose workflow failed (counted in `done`)"""
    runs: int
    last: str = ""
    """The most recent finished episode, one line."""


class BatchResult(Model):
    batch: str
    spec_name: str
    schedule: str | None = None
    total: int
    runs: int
    """Runs in the continue-as-new chain."""
    elapsed_s: float
    """From the first run's start to the end."""
    metrics: BatchMetrics
    errors: list[str] = Field(default_factory=list)
    status: BatchStatus = "done"
    budget: BudgetName | None = None
    """With status `budget_exhausted`: the budget reached (the spending is in
    `metrics`: model_tokens, model_calls, episode_seconds)."""
