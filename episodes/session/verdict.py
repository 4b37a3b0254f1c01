"""What a finished harness turn says before the env has its say (LiveSession's turns).

- `disarm`: a harness event shaped like a service's record keeps its data under
  `harness:<kind>`.
- `ended`: the result of a turn that ends the episode whatever the env would answer
  (a breach of the harness's limits, a failed model call, a harness that crashed,
  timed out or broke the protocol), or None: the env decides.
"""

from __future__ import annotations

from typing import Any

from episodes.errors import ModelError
from episodes.types.results import StepOutcome, TurnRecord, TurnResult

# Kinds only the session's own services record (the model proxy, the tool bridge).
SERVICE_KINDS = frozenset({"model_call", "tool_call"})


def disarm(event: Any) -> Any:
    """A harness event shaped like a service's record keeps its data under
    `harness:<kind>`. Hazard: the harness is untrusted, and trainers build samples from
    `model_call` records; a forged one would put made-up tokens in the training data.
    In place, so the driver's copy (matched by identity in `LiveSession._run_turn`) is
    the same object."""
    if isinstance(event, dict) and event.get("kind") in SERVICE_KINDS:
        event["kind"] = f"harness:{event['kind']}"
    return event


def ended(
    n: int, record: TurnRecord, breach: str | None, model_failure: ModelError | None
) -> TurnResult | None:
    """Turn `n`'s result when it ends the episode, or None (the env steps on it)."""
    if breach is not None:
        # Whatever the driver saw (the harness stopped under it): the breach.
        error = f"protocol error in turn {n}: {breach}"
        return TurnResult(
            record=record.model_copy(update={"error": error, "error_type": "protocol_error"}),
            observation=StepOutcome(done=True),
            termination="protocol_error",
        )
    if model_failure is not None:
        # The harness saw a failed model call; however it answered, the episode cannot
        # go on as the trainer meant it: `model_error`, with the reason first (what the
        # harness made of it, "HTTP Error 502", after it).
        error = str(model_failure)
        if record.error:
            error += f"\n--- the harness ---\n{record.error}"
        return TurnResult(
            record=record.model_copy(update={"error": error}),
            observation=StepOutcome(done=True),
            termination="model_error",
        )
    if record.error_type and record.error_type != "harness_error":
        # Crashed, timed out, broke the protocol: the driver stopped the harness.
        return TurnResult(
            record=record, observation=StepOutcome(done=True), termination=record.error_type
        )
    return None
