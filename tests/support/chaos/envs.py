"""Environments for the chaos tests, imported by name in real worker processes."""

from __future__ import annotations

from typing import Any

from episodes.envs.base import Environment
from episodes.types.results import ScoreResult, StepOutcome, Task, Transcript


class Flood(Environment):
    """A small first message, then `mb` MiB in the next one (made on the worker, so it
    never passes through a workflow payload)."""

    def reset(self, task: Task) -> Any:
        return "small"

    def step(self, reply: Any) -> StepOutcome:
        return StepOutcome(message="x" * (int(self.env_args.get("mb", 8)) * 2**20))

    def score(self, transcript: Transcript) -> ScoreResult:
        return ScoreResult(reward=0.0, details={"turns": len(transcript.turns)})


FLOOD = f"{__name__}:Flood"
