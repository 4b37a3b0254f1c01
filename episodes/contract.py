"""What workflows, activities and clients must agree on, defined once.

Workflow type names, Update and query names, the failure types that cross from an
activity (or a validator) to the code that handles them, the activities'
declarations and an episode's workflow id. Running episodes and saved histories
carry these names: renaming one breaks them.

Models only: the standard library, pydantic models and `temporalio.activity` (for
the declarations), so workflows import this module through the sandbox.
`tests/episodes/test_contract.py` checks the activity implementations and the failure
types they raise against it.
"""

from __future__ import annotations

from typing import Literal

from temporalio import activity

from episodes.types.attempts import retry_id as retry_id  # the naming lives with its parsing
from episodes.types.group import GroupInput, GroupProgress, GroupResult
from episodes.types.io import (
    DriveInput,
    DriveResult,
    ProvisionInput,
    ReleaseInput,
    RestoreInput,
    RestoreResult,
    ScoreInput,
    ScoreTranscriptInput,
    SessionRef,
    TurnInput,
)
from episodes.types.priority import RecordedUsage
from episodes.types.results import (
    EpisodeResult,
    ErrorType,
    ScoreResult,
    Task,
    Termination,
    TurnResult,
)
from episodes.types.spec import EpisodeSpec

# -- workflow types ---------------------------------------------------------------------

EPISODE_WORKFLOW = "EpisodeWorkflow"
INTERACTIVE_WORKFLOW = "InteractiveEpisodeWorkflow"
BATCH_WORKFLOW = "EvalBatchWorkflow"
# One workflow per group (`run_batch(groups=True, execution="group")`): episodes.types.group.
GROUP_WORKFLOW = "EpisodeGroupWorkflow"
# A batch's receipts: consumed groups and dispatch versions: episodes.types.receipts.
RECEIPTS_WORKFLOW = "BatchReceiptsWorkflow"

# -- Updates and queries ----------------------------------------------------------------

RECORD_TURNS = "record_turns"  # EpisodeWorkflow: the drive's finished turns
OPEN = "open"  # InteractiveEpisodeWorkflow: the first observation
STEP = "step"  # InteractiveEpisodeWorkflow: one trainer-written turn
CLOSE = "close"  # InteractiveEpisodeWorkflow: end, score, release
PROGRESS = "progress"  # every workflow: where it is
PARK = "park"  # EpisodeWorkflow (signal): release box and harness at the next turn boundary
RESUME = "resume"  # EpisodeWorkflow (signal): a parked episode re-provisions and replays
# A provision's heartbeat while it waits for its worker's saturated model fleet
# (activities/fleet_wait.py); `episodes.client.batch.live` counts such an episode as waiting.
FLEET_WAIT = "waiting for the model fleet"
# A provision's heartbeat while it waits for room under its worker's box caps
# (activities/box_wait.py); `episodes.client.batch.live` counts it as waiting too.
BOX_WAIT = "waiting for room for a box"
CUT = "cut"  # EpisodeWorkflow (signal): why the cancel that follows cuts it (EpisodeResult.cut)
METRICS = "metrics"  # EvalBatchWorkflow: the metrics so far
ACK = "ack"  # BatchReceiptsWorkflow (signal): the trainer consumed a group
DISPATCHED = "dispatched"  # BatchReceiptsWorkflow (signal): a group's dispatch version
# EvalBatchWorkflow (signal, from its child EpisodeWorkflow): (workflow id, parked) when
# the child parks (True) and when it resumes (False): the batch counts its parked ones.
EPISODE_PARKED = "episode_parked"

# -- failure types (ApplicationError.type) ------------------------------------------------

# Raised by activities: the worker does not hold the session (restarted, or reaped).
SESSION_NOT_FOUND = "SessionNotFound"
# `episodes.errors.TurnOutOfOrder`, passed on by the `turn` and `drive` activities.
TURN_OUT_OF_ORDER = "TurnOutOfOrder"
# `episodes.errors.BoxLost`, raised by the `drive` and `turn` activities (the session
# dropped): the box died under the turn, not by the harness's doing; the workflow fails
# over to a fresh box by replay.
BOX_LOST = "BoxLost"
# `episodes.errors.SpecError` and its subclass, passed on by `provision` and
# `score_transcript`: a bad spec is not retried.
SPEC_ERROR = "SpecError"
ENVIRONMENT_LOAD_ERROR = "EnvironmentLoadError"
# Every `SpecError` by its class name (the type `provision` raises it with): a
# configuration error (an env the worker cannot import, a secret it cannot read, a box
# the spec cannot start). The episode ends `harness_start_failed`, marked
# `config_error`: not an infrastructure failure, never run again (the same worker
# fails it the same way), and `episodes run` prints the fix once.
SPEC_ERRORS: tuple[str, ...] = (
    SPEC_ERROR,
    ENVIRONMENT_LOAD_ERROR,
    "SecretMissing",
    "TunnelFailed",
    "PayloadsConfigError",
    "GroupTooBig",
)
# `HarnessFailure.error_type`s a harness can fail `provision` with: the episode's
# outcome (its termination), not a retry.
PROVISION_FAILURES: tuple[ErrorType, ...] = (
    "harness_start_failed",
    "harness_crashed",
    "protocol_error",
    "turn_timeout",
    "limit_exceeded",
)
NON_RETRYABLE_PROVISION = (*PROVISION_FAILURES, *SPEC_ERRORS)
# `episodes.errors.EnvironmentFailed` (the env's reset raised), raised non-retryable by
# `provision` and `restore`: the episode ends `env_error`, scored and released.
ENV_ERROR: Literal["env_error"] = "env_error"
PROVISION_OUTCOMES: tuple[Termination, ...] = (*PROVISION_FAILURES, ENV_ERROR)
# What a batch runs again as a fresh episode: `episodes.types.results.is_infra_failure`.
# Raised by `await_episode`: the episode's workflow failed, there is no result.
EPISODE_FAILED = "EpisodeFailed"
# Raised by EpisodeWorkflow's `record_turns` validator (rejected Updates leave no trace):
# a retried drive re-sending turns the workflow holds (the recorder goes on) ...
TURNS_ALREADY_RECORDED = "TurnsAlreadyRecorded"
# ... or turns it cannot take (no drive running, a gap): the drive fails.
TURNS_REJECTED = "TurnsRejected"
# Raised by InteractiveEpisodeWorkflow's `step` validator; the client raises StepRejected.
STEP_REJECTED = "StepRejected"

# -- activities ---------------------------------------------------------------------------
# Declarations only: workflows call these typed references; the implementations in
# `activities/` register under the same names with the same signatures.

PROVISION = "provision"
DRIVE = "drive"
TURN = "turn"
SCORE = "score"
RELEASE = "release"
SCORE_TRANSCRIPT = "score_transcript"
AWAIT_EPISODE = "await_episode"
RESTORE = "restore"
RUN_GROUP = "run_group"
AWAIT_GROUP = "await_group"
RECORDED_USAGE = "recorded_usage"


def side_queue(task_queue: str) -> str:
    """The queue of activities that hold no session and must not take the shared queue's
    slots, which gate `provision` (`await_episode` may wait for a day)."""
    return f"{task_queue}-side"


@activity.defn(name=PROVISION)
async def provision(inp: ProvisionInput) -> SessionRef:
    """Any worker: start the box and the harness, register the live session."""
    raise NotImplementedError


@activity.defn(name=DRIVE)
async def drive(inp: DriveInput) -> DriveResult:
    """The session's worker: run the turns, record them with `record_turns`, score."""
    raise NotImplementedError


@activity.defn(name=TURN)
async def turn(inp: TurnInput) -> TurnResult:
    """The session's worker: one turn (an interactive step)."""
    raise NotImplementedError


@activity.defn(name=SCORE)
async def score(inp: ScoreInput) -> ScoreResult:
    """The session's worker: the env's rubric over the session's transcript."""
    raise NotImplementedError


@activity.defn(name=RELEASE)
async def release(inp: ReleaseInput) -> None:
    """The session's worker: stop the harness, stop or park the box."""
    raise NotImplementedError


@activity.defn(name=SCORE_TRANSCRIPT)
async def score_transcript(inp: ScoreTranscriptInput) -> ScoreResult:
    """Any worker (a local activity): score a recorded transcript, without the session."""
    raise NotImplementedError


@activity.defn(name=AWAIT_EPISODE)
async def await_episode(workflow_id: str) -> EpisodeResult:
    """Any worker: the result of an episode that already exists under `workflow_id`."""
    raise NotImplementedError


@activity.defn(name=RESTORE)
async def restore(inp: RestoreInput) -> RestoreResult:
    """Any worker (gated like provision): a new session with the recorded turns replayed."""
    raise NotImplementedError


@activity.defn(name=RUN_GROUP)
async def run_group(inp: GroupInput) -> GroupProgress:
    """Any worker (gated like provision): drive every member of a group to its end
    in-process, heartbeating their turns; a retry restores the members from them."""
    raise NotImplementedError


@activity.defn(name=AWAIT_GROUP)
async def await_group(workflow_id: str) -> GroupResult:
    """Any worker (the side queue): the result of a group workflow that already exists."""
    raise NotImplementedError


@activity.defn(name=RECORDED_USAGE)
async def recorded_usage(workflow_id: str) -> RecordedUsage:
    """Any worker (the side queue): the model use a failed episode's history recorded
    (a batch's budget counts it)."""
    raise NotImplementedError


DECLARED = [
    provision,
    drive,
    turn,
    score,
    release,
    score_transcript,
    await_episode,
    restore,
    run_group,
    await_group,
    recorded_usage,
]

# -- an episode's identity ------------------------------------------------------------------


def episode_id(batch: str, task_id: str, sample: int) -> str:
    """An episode's workflow id: a restarted trainer or batch re-attaches instead of
    running it twice."""
    return f"{batch}.{task_id}.s{sample}"


def session_workflow_id(batch: str, task_id: str, sample: int) -> str:
    """An interactive session's workflow id."""
    return f"{episode_id(batch, task_id, sample)}.session"


def group_id(batch: str, task_id: str) -> str:
    """A group: the samples of one task in a batch (GRPO's group), in exports and streams."""
    return f"{batch}/{task_id}"


def batch_workflow_id(batch: str) -> str:
    return f"batch.{batch}"


def receipts_workflow_id(batch: str) -> str:
    """The batch's receipts (`BatchReceiptsWorkflow`): the groups a trainer acknowledged."""
    return f"{batch}.receipts"


def single_task_spec(spec: EpisodeSpec, task: Task) -> EpisodeSpec:
    """The spec an episode carries: just its own task, not the whole dataset."""
    return spec.model_copy(update={"tasks": [task], "dataset": None, "harbor": None})
