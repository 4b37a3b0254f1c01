"""What an episode produces: tasks, turn records, outcomes, scores, transcripts, results.

Only pydantic and the standard library here (the `episodes.types` floor): workflows
import this module, and the workflow sandbox must load it deterministically.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import Field, TypeAdapter

from episodes.types.base import Model
from episodes.types.cost import Cost, ModelUsage
from episodes.types.events import Event, ModelCall, ToolCall, resolve_model_calls

# Why an episode ended. Harness failures are outcomes, not exceptions: the
# episode is still scored and released.
Cut = Literal["straggler", "group_timeout"]
"""Why a groups stream cut an episode (`EpisodeResult.cut`)."""

Termination = Literal[
    "env_done",
    "max_turns",
    "harness_start_failed",
    "harness_crashed",
    "turn_timeout",
    "protocol_error",
    "harness_error",
    # The box went past one of its `limits` (memory, processes, disk): the harness's
    # doing; which limit is in `error`.
    "limit_exceeded",
    "worker_lost",
    # The box died under the episode (removed or stopped from outside, its engine or VM
    # gone) more times than `max_box_failovers` allows: infrastructure, not the agent.
    "box_lost",
    # The environment's own code raised (reset or step): its message and traceback tail
    # are in `error`.
    "env_error",
    # The model proxy gave up on a call (upstream 429/5xx/timeouts past its retries).
    "model_error",
    "cancelled",
    # Interactive sessions: the trainer closed the session before the env said done,
    # or sent no step for the session's idle timeout.
    "closed",
    "idle_timeout",
    # No EpisodeResult: the episode's workflow failed (a bug, a bad spec). Batches record
    # it under this name (WORKFLOW_FAILED) and go on; no workflow ends with it.
    "workflow_failed",
]

# The termination a batch records for an episode whose workflow failed (no EpisodeResult).
WORKFLOW_FAILED: Final = "workflow_failed"

# -- whose doing an outcome is, defined once ----------------------------------------------
# Batches, groups (`run_batch(groups=True)`), the viewer's split and its search filter
# all read these. The infrastructure's: a worker lost after its restarts, a model
# upstream that gave up (the proxy's retries exhausted; a 4xx is the harness's own
# doing and ends otherwise), a workflow that failed with no result (a provision that
# could not get a box, the server's doing; a bug too, which is why only a provision's
# counts as re-runnable, see `is_infra_failure`). The agent's: its harness crashed,
# broke the protocol, timed out or reported an error. The env's own code raising is
# neither; clean endings (the env said done, the turn budget ran out, the trainer
# closed the session) are outcomes, not failures.

# What a batch runs again as a fresh episode (`<id>.r<n>`): the agent had no say in it.
RERUN_TERMINATIONS: frozenset[str] = frozenset({"worker_lost", "box_lost", "model_error"})
INFRA_TERMINATIONS: frozenset[str] = frozenset(
    {*RERUN_TERMINATIONS, WORKFLOW_FAILED, "terminated", "timed_out"}
)
AGENT_TERMINATIONS: frozenset[str] = frozenset(
    {
        "harness_start_failed",
        "harness_crashed",
        "harness_error",
        "protocol_error",
        "turn_timeout",
        "idle_timeout",
        "limit_exceeded",
    }
)
ENV_TERMINATIONS: frozenset[str] = frozenset({"env_error"})
OK_TERMINATIONS: frozenset[str] = frozenset({"env_done", "max_turns", "closed"})


def is_infra_failure(termination: str, *, provision_failed: bool = False) -> bool:
    """Whether an episode that ended so is run again as a fresh episode: a rerun
    termination, or a failed workflow whose `provision` failed for a non-harness reason
    (after Temporal's retries: no box could be had)."""
    return termination in RERUN_TERMINATIONS or (
        termination == WORKFLOW_FAILED and provision_failed
    )


# The subset of terminations that a failing harness or runtime produces.
ErrorType = Literal[
    "harness_start_failed",
    "harness_crashed",
    "turn_timeout",
    "protocol_error",
    "harness_error",
    "limit_exceeded",
    "worker_lost",
    # Said by a harness driver whose box died under the turn (never recorded: the
    # session raises `BoxLost` and the episode fails over).
    "box_lost",
]


class Task(Model):
    """One unit of work from a dataset: an id and whatever the environment reads."""

    id: str
    data: dict[str, Any] = Field(default_factory=dict)


class TurnRecord(Model):
    """One turn as the harness saw it: what was sent, what streamed back, the answer."""

    turn: int
    message: Any = None
    events: list[Any] = Field(default_factory=list)
    reply: Any = None
    error: str | None = None
    error_type: ErrorType | None = None
    duration_ms: float = 0.0


class StepOutcome(Model):
    """What the environment made of a reply."""

    message: Any = None
    """The next message, when not done."""
    done: bool = False
    reward: float | None = None


class TurnError(Model):
    """A turn the harness answered with an `error` packet (an ACP agent: a JSON-RPC error
    to its prompt): that turn failed, and the harness is still running. What
    `Environment.step_error` gets in place of a reply; the turn's record keeps it too
    (`error`, `error_type: harness_error`)."""

    turn: int
    error: str
    """What the harness reported, then the tail of its stderr (known secrets masked)."""


class TurnResult(Model):
    """What one turn activity returns to the workflow: the record plus the observation."""

    record: TurnRecord
    observation: StepOutcome
    termination: Termination | None = None
    """Set when this turn ended the episode for a reason other than the env saying
    so."""


class ScoreResult(Model):
    reward: float | None = None
    details: dict[str, Any] = Field(default_factory=dict)


class Transcript(Model):
    task: Task
    first_message: Any = None
    turns: list[TurnRecord] = Field(default_factory=list)
    termination: Termination | None = None
    error: str | None = None
    replayed_turns: int = 0
    """A fork's branch: its first turns are its parent's, replayed (their model calls
    are prompt to a trainer, never completion: `episodes.training.samples`)."""

    def events(self, kind: str | None = None) -> list[Any]:
        """Every turn's events in order; with `kind`, only dict events of that kind."""
        found = [e for t in self.turns for e in t.events]
        return found if kind is None else [e for e in found if _kind(e) == kind]

    def typed_events(self) -> list[Event]:
        """Every turn's events in order, typed (`episodes.types.events`); model calls as
        `model_calls()` gives them (whole conversations)."""
        events = self.events()
        calls = iter(resolve_model_calls(events))
        return [
            next(calls) if _kind(e) == "model_call" else _EVENTS.validate_python(e) for e in events
        ]

    def model_calls(self) -> list[ModelCall]:
        """Every call the harness made through the session's model proxy, in order, with
        the token data the upstream returned parsed (`call.prompt_ids`, ...) and the whole
        conversation it sent (`call.messages`: the record keeps only what each call added)."""
        return resolve_model_calls(self.events("model_call"))

    def tool_calls(self) -> list[ToolCall]:
        """Every call of the env's tools over the MCP bridge, in order."""
        return [ToolCall.model_validate(e) for e in self.events("tool_call")]


_EVENTS: TypeAdapter[Event] = TypeAdapter(Event)


def _kind(event: Any) -> Any:
    return event.get("kind") if isinstance(event, dict) else None


class ForkOrigin(Model):
    """Where a fork's branch came from: its parent episode and the turn it branched at
    (the branch replayed the parent's turns `0..at_turn-1` exactly, then went on live)."""

    workflow_id: str
    at_turn: int = Field(ge=0)
    branch: int = Field(default=0, ge=0)
    """Which of the fork's branches (`<parent>.f<at_turn>.<branch>`)."""


class EpisodeResult(Model):
    workflow_id: str
    task_id: str
    sample: int
    env: str
    spec_name: str
    termination: Termination
    error: str | None = None
    turns: int
    reward: float | None = None
    score_details: dict[str, Any] = Field(default_factory=dict)
    duration_s: float
    pool_hit: bool | None = None
    """Whether provision reused a parked box (spec.reuse_key), None when no pool was
    asked for."""
    runtime: str | None = None
    """Where the episode's box ran: the type of the spec's runtime it got (a spillover
    runtime when the first had no room; the last box's after a failover). None when it
    never got one, and in results from before it was recorded."""
    restarts: int = 0
    """`on_worker_lost: restart`: sessions restored on another worker, the recorded
    turns replayed into them, the replayed turns whose reply differed from the
    recorded one, and finished turns the lost worker had not recorded yet (run
    again). 0 in results from before restarts existed."""
    turns_replayed: int = 0
    replay_divergences: int = 0
    turns_rerun: int = 0
    box_failovers: int = 0
    """Times the episode's box died under it for a reason not the harness's (removed
    from outside, its engine or VM gone) and it went on in a fresh box by exact replay
    (its replayed turns are in `turns_replayed`). 0 in results from before failovers."""
    model_calls: int = 0
    """Calls through the session's model proxy over the whole episode, and the tokens
    the upstream reported for them (0 in results from before they were counted)."""
    model_tokens: int = 0
    usage: dict[str, ModelUsage] = Field(default_factory=dict)
    """Per model: its calls and the tokens the upstream reported (input, cached input,
    output, reasoning: `episodes.types.cost.ModelUsage`), never averages. Empty in
    results from before it was kept."""
    cost: Cost | None = None
    """What the episode cost under the spec's `prices` (model calls and box time), None
    without a price table."""
    retries: int = 0
    """Fresh episodes (`<id>.r<n>`) a client-side batch (`run_batch`) ran for this task
    and sample after infrastructure failures before this one. A re-run of an episode
    cancelled when an earlier run was left (Ctrl-C) is not one. 0 elsewhere."""
    forked_from: ForkOrigin | None = None
    """A fork's branch: the parent and turn it replayed up to (`EpisodesClient.fork`)."""
    cut: Cut | None = None
    """A groups stream (`run_batch(groups=True)`) cut this episode (it ended
    `cancelled`): `straggler`, its group had its `samples` members without it (the
    spec's `oversample`), or `group_timeout`. It belongs to no group: `episodes export`
    leaves it out. None in every other episode."""
    config_error: bool = False
    """It could not start because of its configuration (an env module the worker cannot
    import, a secret it cannot read, a box the spec cannot start): `harness_start_failed`
    with the fix in `error`. Running it again fails the same way, so no batch does."""
