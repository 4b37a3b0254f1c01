"""The environment API: plain Python that talks to the harness one turn at a time.

An environment instance lives for one episode. Methods may be sync or async.

    class MyEnv(Environment):
        def reset(self, task):            # -> the first message sent to the harness
        def step(self, reply):            # -> StepOutcome(message=..., done=..., reward=...)
        def score(self, transcript):      # -> ScoreResult(reward=..., details={...})
"""

from __future__ import annotations

import inspect
from typing import Any

from episodes.models import ScoreResult, StepOutcome, Task, Transcript


class Environment:
    """Base class. `env_args` from the spec arrive as keyword arguments."""

    #: The name this env is registered under, for built-ins.
    name: str = ""

    def __init__(self, **env_args: Any) -> None:
        self.env_args = env_args

    def reset(self, task: Task) -> Any:
        raise NotImplementedError

    def step(self, reply: Any) -> StepOutcome:
        raise NotImplementedError

    def score(self, transcript: Transcript) -> ScoreResult:
        # Default: no reward. Override to grade the transcript (and the env's own state).
        return ScoreResult()


async def call(fn: Any, *args: Any) -> Any:
    """Call an env method that may be sync or async."""
    result = fn(*args)
    if inspect.isawaitable(result):
        result = await result
    return result
