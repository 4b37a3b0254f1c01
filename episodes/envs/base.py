"""The environment API: plain Python that talks to the harness one turn at a time.

An environment instance lives for one episode. Methods may be sync or async.

    class MyEnv(Environment):
        def reset(self, task):            # -> the first message sent to the harness
        def step(self, reply):            # -> StepOutcome(message=..., done=..., reward=...)
        def score(self, transcript):      # -> ScoreResult(reward=..., details={...})
        def tools(self):                  # -> callables or a fastmcp.FastMCP (optional)

and, during `reset`, `step` and `score`, `self.box`: the episode's box (run a command,
read and write files, copy a directory in; `episodes.runtimes.box.Box`).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from episodes.runtimes.box import Box
from episodes.types.results import ScoreResult, StepOutcome, Task, Transcript

if TYPE_CHECKING:  # fastmcp is only needed by envs that hand over a server of their own
    from fastmcp import FastMCP

    from episodes.types.runtime import RuntimeConfig

_NO_BOX = Box(
    None,
    why_none="this env has no box: it was not opened by a session (a score of the recorded "
    "transcript after its worker was lost runs away from the box)",
)


class Environment:
    """Base class. `env_args` from the spec arrive as keyword arguments."""

    #: The name this env is registered under, for built-ins.
    name: str = ""

    #: The episode's box, set by the session before `tools()` and `reset()`: commands,
    #: files, directories in the box the harness works in (`episodes.runtimes.box.Box`).
    #: Every call raises `BoxGone` when there is none (see `_NO_BOX`) or it is gone; a
    #: score that raises ends the episode `env_error`. Commands run during `score()`
    #: end within the spec's `score_timeout_s`.
    box: Box = _NO_BOX

    #: This episode's turn timeout, when the env knows a shorter one than the spec's
    #: `turn_timeout_s` (set in `reset`: a Harbor task's agent timeout). None: the spec's.
    turn_timeout_s: float | None = None

    def __init__(self, **env_args: Any) -> None:
        self.env_args = env_args

    def box_config(
        self, task: Task, config: RuntimeConfig
    ) -> RuntimeConfig | Awaitable[RuntimeConfig]:
        """The box this episode runs in: the spec's `harness.runtime` (`config`) by default.

        Called on the worker before the box exists (so `self.box` is not usable yet),
        possibly slow (building an image); raise `SpecError` for a task that cannot run.
        """
        return config

    def reset(self, task: Task) -> Any:
        raise NotImplementedError

    def step(self, reply: Any) -> StepOutcome | Awaitable[StepOutcome]:
        raise NotImplementedError

    def score(self, transcript: Transcript) -> ScoreResult | Awaitable[ScoreResult]:
        # Default: no reward. Override to grade the transcript (and the env's own state).
        return ScoreResult()

    def tools(self) -> Sequence[Callable[..., Any]] | FastMCP | None:
        """Tools the harness may call over MCP during the episode (default: none).

        Return plain callables (sync or async; the name, type hints and docstring
        become the MCP tool schema) or a `fastmcp.FastMCP` server. They are served
        to the harness by `episodes.agents.bridge.ToolBridge`, whose address and
        bearer token reach the harness as `EPISODES_MCP_URL` / `EPISODES_MCP_TOKEN`.

        Tools run in this env object on the worker, on the same event loop as
        `step` and `score` (sync callables are not moved to a thread), so they may
        change the env's state and `step`/`score` see exactly what they did. A
        blocking tool blocks the worker's loop: make slow tools async.

        Called once per episode, before the harness starts (it gets the address at
        start), so also before `reset`: tools should read the env's state when
        called rather than capture it here, and cope with a call before `reset`.
        """
        return None


async def call(fn: Any, *args: Any) -> Any:
    """Call an env method that may be sync or async."""
    result = fn(*args)
    if inspect.isawaitable(result):
        result = await result
    return result
