"""`guess-number`: the harness guesses a secret integer; the env says higher or lower.

Settings come from env_args, overridden per task by task.data:
`low`, `high` (default 1..100), `secret` (default: derived from the task id with
SHA-256, so every worker and every retry picks the same one), `budget` turns (default 10).

    reset -> {"low": 1, "high": 100, "budget": 10, "feedback": null}
    reply:   an int guess (anything else, bools included, wastes the turn: "invalid")
    step  -> {"feedback": "higher" | "lower" | "invalid", "turns_left": n}

The episode is done on "correct" or when the budget is spent.

Reward: found on turn t (1-based) -> 1 - (t - 1) / budget; not found -> 0.
So the first turn earns 1.0 and the last turn of a budget of 10 earns 0.1.
"""

from __future__ import annotations

import hashlib
from typing import Any

from episodes.envs.base import Environment
from episodes.types.results import ScoreResult, StepOutcome, Task, Transcript


def derive_secret(task_id: str, low: int, high: int) -> int:
    """A stable secret in [low, high] for a task id (not Python's per-process hash())."""
    digest = hashlib.sha256(task_id.encode()).digest()
    return low + int.from_bytes(digest[:8], "big") % (high - low + 1)


def reward_for(found_on_turn: int | None, budget: int) -> float:
    if found_on_turn is None:
        return 0.0
    return 1.0 - (found_on_turn - 1) / budget


class GuessNumberEnv(Environment):
    name = "guess-number"

    def __init__(
        self, *, low: int = 1, high: int = 100, secret: int | None = None, budget: int = 10
    ) -> None:
        super().__init__(low=low, high=high, secret=secret, budget=budget)
        self._check(low, high, secret, budget, where="env_args")
        self._defaults = {"low": low, "high": high, "secret": secret, "budget": budget}
        self._game: _Game | None = None

    @staticmethod
    def _check(low: Any, high: Any, secret: Any, budget: Any, *, where: str) -> None:
        for key, v in (("low", low), ("high", high), ("budget", budget)):
            if not _is_int(v):
                raise ValueError(f"guess-number: {where}.{key} must be an integer, got {v!r}")
        if low > high:
            raise ValueError(f"guess-number: {where}: low ({low}) is greater than high ({high})")
        if budget < 1:
            raise ValueError(f"guess-number: {where}.budget must be at least 1, got {budget}")
        if secret is not None and not (_is_int(secret) and low <= secret <= high):
            raise ValueError(
                f"guess-number: {where}.secret must be an integer in [{low}, {high}], "
                f"got {secret!r}"
            )

    def settings(self, task: Task) -> tuple[int, int, int, int]:
        """(low, high, secret, budget) for a task: task.data over env_args over defaults."""
        merged = {**self._defaults, **{k: task.data[k] for k in self._defaults if k in task.data}}
        low, high, secret, budget = (merged[k] for k in ("low", "high", "secret", "budget"))
        self._check(low, high, secret, budget, where=f"task {task.id!r} data")
        if secret is None:
            secret = derive_secret(task.id, low, high)
        return low, high, secret, budget

    def reset(self, task: Task) -> Any:
        low, high, secret, budget = self.settings(task)
        self._game = _Game(secret, budget)
        return {"low": low, "high": high, "budget": budget, "feedback": None}

    def step(self, reply: Any) -> StepOutcome:
        game = self._game
        if game is None or game.done:
            raise RuntimeError("guess-number env: step() called after done or before reset()")
        feedback = game.guess(reply)
        if game.done:
            return StepOutcome(done=True, reward=reward_for(game.found_on, game.budget))
        return StepOutcome(message={"feedback": feedback, "turns_left": game.budget - game.turns})

    def score(self, transcript: Transcript) -> ScoreResult:
        # Replays the recorded replies: the score depends only on the transcript.
        _, _, secret, budget = self.settings(transcript.task)
        game = _Game(secret, budget)
        guesses = []
        for record in transcript.turns:
            if game.done:
                break
            reply = None if record.error is not None else record.reply
            guesses.append(reply)
            game.guess(reply)
        return ScoreResult(
            reward=reward_for(game.found_on, budget),
            details={
                "secret": secret,
                "found": game.found_on is not None,
                "turns_used": game.turns,
                "budget": budget,
                "guesses": guesses,
                "invalid": game.invalid,
            },
        )


class _Game:
    def __init__(self, secret: int, budget: int) -> None:
        self.secret = secret
        self.budget = budget
        self.turns = 0
        self.invalid = 0
        self.found_on: int | None = None

    @property
    def done(self) -> bool:
        return self.found_on is not None or self.turns >= self.budget

    def guess(self, reply: Any) -> str:
        self.turns += 1
        if not _is_int(reply):
            self.invalid += 1
            return "invalid"
        if reply == self.secret:
            self.found_on = self.turns
            return "correct"
        return "higher" if reply < self.secret else "lower"


def _is_int(v: Any) -> bool:
    # bool is an int subclass, but `true` is not a guess.
    return isinstance(v, int) and not isinstance(v, bool)
