"""The results an episode produces, under the import path environment authors were
told to use (`from episodes.models import StepOutcome, ScoreResult, Task`).

They are defined in `episodes.types.results`; new code imports them from there or
from the package itself (`from episodes import StepOutcome`).
"""

from __future__ import annotations

from episodes.types.base import Model
from episodes.types.results import (
    WORKFLOW_FAILED,
    EpisodeResult,
    ErrorType,
    ScoreResult,
    StepOutcome,
    Task,
    Termination,
    Transcript,
    TurnError,
    TurnRecord,
    TurnResult,
)

__all__ = [
    "WORKFLOW_FAILED",
    "EpisodeResult",
    "ErrorType",
    "Model",
    "ScoreResult",
    "StepOutcome",
    "Task",
    "Termination",
    "Transcript",
    "TurnError",
    "TurnRecord",
    "TurnResult",
]
