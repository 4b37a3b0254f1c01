"""Environments for integration tests, importable by the in-process workers by name."""

from __future__ import annotations

import asyncio
from typing import Any

from episodes.envs.base import Environment
from episodes.models import ScoreResult, StepOutcome, Task, Transcript


class Endless(Environment):
    """Never done: the episode ends at max_turns. Scores how many turns it was shown.

    env_args: `delay_s`, a pause in each step (turns slower than an Update's round
    trip); `pad`, characters appended to every message (big turns).
    """

    def reset(self, task: Task) -> Any:
        self.n = 0
        return self._message()

    async def step(self, reply: Any) -> StepOutcome:
        await asyncio.sleep(self.env_args.get("delay_s", 0))
        self.n += 1
        return StepOutcome(message=self._message())

    def score(self, transcript: Transcript) -> ScoreResult:
        return ScoreResult(reward=1.0, details={"turns": len(transcript.turns)})

    def _message(self) -> str:
        return f"m{self.n}" + "x" * self.env_args.get("pad", 0)


ENDLESS = f"{__name__}:Endless"


class Faulty(Environment):
    """Raises from its own code: `on: reset`, or `on: step` at step `at` (0-based); with
    `on: score` its score() hangs for `hang_s` (default 20) instead."""

    def reset(self, task: Task) -> Any:
        if self.env_args.get("on") == "reset":
            raise KeyError("reset-canary")
        self.n = 0
        return "m0"

    def step(self, reply: Any) -> StepOutcome:
        if self.env_args.get("on", "step") == "step" and self.n == self.env_args.get("at", 1):
            raise ValueError(f"step-canary at {self.n}")
        self.n += 1
        return StepOutcome(message=f"m{self.n}")

    async def score(self, transcript: Transcript) -> ScoreResult:
        if self.env_args.get("on") == "score":
            await asyncio.sleep(self.env_args.get("hang_s", 20))
        return ScoreResult(reward=0.5, details={"turns": len(transcript.turns)})


FAULTY = f"{__name__}:Faulty"
