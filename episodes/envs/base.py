"""The environment API: plain Python that talks to the harness one turn at a time.

An environment instance lives for one episode. Methods may be sync or async.

    class MyEnv(Environment):
        def reset(self, task):            # -> the first message sent to the harness
        def step(self, reply):            # -> StepOutcome(message=..., done=..., reward=...)
        def step_error(self, error):      # -> StepOutcome, or None: end `harness_error` (optional)
        def score(self, transcript):      # -> ScoreResult(reward=..., details={...})
        def tools(self):                  # -> callables or a fastmcp.FastMCP (optional)

and, during `reset`, `step` and `score`, `self.box`: the episode's box (run a command,
read and write files, copy a directory in; `episodes.runtimes.box.Box`).

Where env code runs: async methods (and async tools) on the worker's event loop, as
any coroutine; sync ones on a thread of the worker's env pool (`EnvCalls`), so a
blocking rubric (`subprocess.run`, `time.sleep`) holds up its own episode, not the
other sessions on the worker. Sync calls into one env instance run one at a time, in
the order they were made: the env never sees two of its sync methods at once.
Hazards of the thread: a sync method must not use the event loop
(`asyncio.get_running_loop()` fails there; make it async instead: the box's methods
are coroutines, so an env that uses its box is async), and an object bound to the
thread that made it (a `sqlite3` connection without `check_same_thread=False`) may
meet a different thread at the next call.

Which calls may come on a fresh instance, never reset: `tools()` (always before
`reset`), and `score()` when the worker that held the episode is gone and the
recorded transcript is scored without it (`score_transcript`): the rubric then sees
only the transcript, not the state the episode left in the lost instance, and no box
(its calls raise `BoxGone`: the episode keeps its outcome, unscored). Anything else
env code raises ends the episode `env_error` (the score's error in its details).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ValidationError

from episodes.errors import EnvironmentFailed
from episodes.runtimes.box import Box
from episodes.types.results import (
    ScoreResult,
    StepOutcome,
    Task,
    Transcript,
    TurnError,
    TurnRecord,
)

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

    #: True: the same calls of this env's tools, made in the same order on a fresh env,
    #: answer the same and leave it in the same state. An exact replay (a restart, a
    #: fork) then runs the replayed turns' tool calls again, rebuilding the env's state;
    #: False (the default): it answers them with the recorded results, not run.
    deterministic_tools: bool = False

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

    def step_error(self, error: TurnError) -> StepOutcome | Awaitable[StepOutcome | None] | None:
        """A turn the harness answered with an `error` packet (an ACP agent: an error to
        its prompt) instead of a reply: `step` for a failed turn. The harness is still
        running and the failed turn is in the transcript either way.

        Return a `StepOutcome` to go on (its `message` is the next turn's, as from
        `step`; `done` ends the episode `env_done`), or None to end the episode
        `harness_error`. Default: None. An env that tolerates failed turns counts them
        itself (say, give up after three in a row); `max_turns` bounds the episode
        whatever it does. Raising ends it `env_error`, as from `step`.
        """
        return None

    def score(self, transcript: Transcript) -> ScoreResult | Awaitable[ScoreResult]:
        """Grade the episode: once, after the last turn, bounded by the spec's
        `score_timeout_s` (past it the episode ends `env_error`; a sync score cannot be
        stopped, only abandoned: it finishes on its thread, and nothing else of this
        env runs meanwhile). Box commands end at 80% of that bound.

        May come on a fresh instance, never reset: the worker that held the episode
        was lost, and the recorded `transcript` is scored without its state. Never
        comes for an episode whose env was never reset (its harness did not start,
        or `reset` raised): that episode gets no reward.
        """
        # Default: no reward. Override to grade the transcript (and the env's own state).
        return ScoreResult()

    def tools(self) -> Sequence[Callable[..., Any]] | FastMCP | None:
        """Tools the harness may call over MCP during the episode (default: none).

        Return plain callables (sync or async; the name, type hints and docstring
        become the MCP tool schema) or a `fastmcp.FastMCP` server. They are served
        to the harness by `episodes.tools.bridge.ToolBridge`, whose address and
        bearer token reach the harness as `EPISODES_MCP_URL` / `EPISODES_MCP_TOKEN`.

        Tools run in this env object on the worker, like `step` and `score`: async
        ones on the event loop, sync ones on the env's threads one at a time with the
        env's other sync calls (module docstring), so they may change the env's state
        and `step`/`score` see exactly what they did.

        Called once per episode, before the harness starts (it gets the address at
        start), so also before `reset`: tools should read the env's state when
        called rather than capture it here, and cope with a call before `reset`.
        """
        return None


async def call(fn: Any, *args: Any) -> Any:
    """Call a callback that may be sync or async, inline (not env code: `EnvCalls`)."""
    result = fn(*args)
    if inspect.isawaitable(result):
        result = await result
    return result


# -- running env code -------------------------------------------------------------------

DEFAULT_ENV_THREADS = 32
_threads = DEFAULT_ENV_THREADS
_pool: ThreadPoolExecutor | None = None
_pool_guard = threading.Lock()


def set_env_threads(n: int) -> None:
    """How many sync env calls may run at once in this process (the worker's
    `env_threads`); more wait for a thread. Takes effect for a pool not yet made."""
    global _threads
    if n < 1:
        raise ValueError(f"env_threads must be at least 1, not {n}")
    _threads = n


def _env_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_guard:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=_threads, thread_name_prefix="episodes-env")
        return _pool


def _is_async(fn: Any) -> bool:
    if inspect.iscoroutinefunction(fn):
        return True
    call_ = getattr(fn, "__call__", None)  # noqa: B004 - an object with an async __call__
    return call_ is not None and inspect.iscoroutinefunction(call_)


class EnvCalls:
    """Calls into one env instance (its methods, its plain-callable tools).

    Async code runs on the loop. Sync code runs on the env pool's threads, never two
    calls of this env at once (the lock), so the worker's event loop (every other
    session's turns, heartbeats and Updates) goes on while a rubric blocks.

    Hazard: a thread cannot be killed. A sync call whose caller gave up (the score's
    timeout, a cancelled activity) is abandoned: it runs on to its end on its thread,
    and the lock stays held until then, so nothing else runs on this env meanwhile
    (a later call waits; the session is being released anyway). The thread is lost to
    the pool for as long: a rubric that never returns takes one for good.
    """

    def __init__(self) -> None:
        self._lock = asyncio.Lock()

    async def __call__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if _is_async(fn):
            return await fn(*args, **kwargs)
        await self._lock.acquire()
        ctx = contextvars.copy_context()
        done = asyncio.get_running_loop().run_in_executor(
            _env_pool(), functools.partial(ctx.run, fn, *args, **kwargs)
        )
        try:
            # Shielded: a cancelled caller must not release the lock under a running call.
            result = await asyncio.shield(done)
        except asyncio.CancelledError:
            if done.done():
                self._lock.release()
            else:
                done.add_done_callback(self._release_abandoned)
            raise
        except BaseException:
            self._lock.release()
            raise
        self._lock.release()
        if inspect.isawaitable(result):  # a sync callable that returned a coroutine
            result = await result
        return result

    def _release_abandoned(self, done: asyncio.Future[Any] | Future[Any]) -> None:
        if not done.cancelled():
            done.exception()  # retrieved: an abandoned call's error is not news
        self._lock.release()

    def tools(self, tools: Any) -> Any:
        """The env's tools with each sync callable run as its sync methods are (a
        `fastmcp.FastMCP` of the env's own is left as it is)."""
        if tools is None or not isinstance(tools, (Mapping, Sequence)):
            return tools
        if isinstance(tools, Mapping):
            return {name: self._offloaded(fn) for name, fn in tools.items()}
        return [self._offloaded(fn) for fn in tools]

    def _offloaded(self, fn: Any) -> Any:
        if not callable(fn) or _is_async(fn):
            return fn

        # The MCP schema comes from the signature, hints and docstring (`wraps`).
        @functools.wraps(fn)
        async def tool(*args: Any, **kwargs: Any) -> Any:
            return await self(fn, *args, **kwargs)

        return tool


M = TypeVar("M", bound=BaseModel)


def _returned(model: type[M], value: Any, method: str, fields: str) -> M:
    """What an env method returned, as `model`: a dict of its fields is taken too;
    anything else is one clear TypeError naming the fix, not pydantic's error list."""
    if isinstance(value, model):
        return value
    try:
        return model.model_validate(value)
    except ValidationError:
        got = type(value).__name__
        if isinstance(value, dict):
            got += f" with keys {sorted(map(str, value))}"
        raise TypeError(
            f"{method}() must return episodes.{model.__name__}, not {got}: "
            f"return {model.__name__}({fields})"
        ) from None


async def step_turn(
    env: Environment,
    record: TurnRecord,
    reply: Any,
    calls: EnvCalls,
    scrub: Callable[[str], str] = str,
) -> StepOutcome | None:
    """What the env makes of a turn: `step(reply)`, or for a turn the harness answered
    with `error`, `step_error` with the error (`scrub`bed of known secrets); None: it
    does not go on. Raises EnvironmentFailed for env code that raised or returned no
    StepOutcome (the episode ends `env_error`)."""
    method = "step"
    try:
        if record.error_type == "harness_error":
            method = "step_error"
            error = TurnError(turn=record.turn, error=scrub(record.error or ""))
            outcome = await calls(env.step_error, error)
            if outcome is None:
                return None
        else:
            outcome = await calls(env.step, reply)
        outcome = _returned(StepOutcome, outcome, method, "message=..., done=..., reward=...")
    except Exception as e:
        raise EnvironmentFailed(method, e) from e
    return outcome


async def score_transcript(
    env: Environment, transcript: Transcript, calls: EnvCalls | None = None
) -> ScoreResult:
    """Score with the env's rubric (outside the harness's control); `calls`: the env's
    (a fresh env: its own). Whatever the env raises (its box gone, its rubric broken,
    or a result that is no ScoreResult) is `EnvironmentFailed`: the episode ends
    `env_error`."""
    try:
        result = await (calls or EnvCalls())(env.score, transcript)
        if result is None:
            result = ScoreResult()
        else:
            result = _returned(ScoreResult, result, "score", "reward=..., details=...")
    except Exception as e:
        raise EnvironmentFailed("score", e) from e
    return result
