"""episodes: durable multi-turn agent episodes on Temporal.

What a trainer, an eval job or an environment author needs is here:

    import episodes

    client = await episodes.connect()          # arguments > TEMPORAL_*/EPISODES_* > profile
    async for result in client.run_batch("examples/guess-number.yaml"):
        print(result.task_id, result.termination, result.reward)

Names load on first use (PEP 562), so `import episodes` costs nothing: a harness
process importing `episodes.harness.sdk` loads no pydantic, and the workflow sandbox,
which runs this file before any `episodes.types` module, loads nothing through it.

The package's layers, for readers of the code: `episodes.types` (what crosses the
workflow boundary: pydantic + stdlib), `episodes.contract` (Temporal names),
`episodes.session` (the live session and its turn loop), `episodes.harness`,
`episodes.runtimes`, `episodes.model` (a model call's path), `episodes.tools` (MCP),
`episodes.tunnel` (a box reaching the services), `episodes.envs`, `episodes.payloads`
(Temporal-free core), and `episodes.client` / `episodes.cli` (Temporal-facing).
`workflows/`, `activities/` and `workers/` build the Temporal application on top.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# name -> (module, attribute): the public face, resolved on first use.
_FACE: dict[str, tuple[str, str]] = {
    # connecting and running
    "connect": ("episodes.client.core", "connect"),
    "EpisodesClient": ("episodes.client.core", "EpisodesClient"),
    "SyncEpisodesClient": ("episodes.client.blocking.client", "SyncEpisodesClient"),
    "InteractiveSession": ("episodes.client.interactive", "InteractiveSession"),
    "Group": ("episodes.client.group.stream", "Group"),
    "run_local": ("episodes.local", "run_episode_local"),
    # specs and results
    "load_spec": ("episodes.specfile", "load_spec"),
    "parse_spec": ("episodes.types.spec", "parse_spec"),
    "EpisodeSpec": ("episodes.types.spec", "EpisodeSpec"),
    "Task": ("episodes.types.results", "Task"),
    "EpisodeResult": ("episodes.types.results", "EpisodeResult"),
    "Transcript": ("episodes.types.results", "Transcript"),
    "TurnRecord": ("episodes.types.results", "TurnRecord"),
    "Termination": ("episodes.types.results", "Termination"),
    "StepReply": ("episodes.types.io", "StepReply"),
    # writing an environment
    "Environment": ("episodes.envs.base", "Environment"),
    "StepOutcome": ("episodes.types.results", "StepOutcome"),
    "ScoreResult": ("episodes.types.results", "ScoreResult"),
    "TurnError": ("episodes.types.results", "TurnError"),
    # errors
    "EpisodesError": ("episodes.errors", "EpisodesError"),
    "SpecError": ("episodes.errors", "SpecError"),
    "ConfigError": ("episodes.errors", "ConfigError"),
    "EpisodeFailed": ("episodes.errors", "EpisodeFailed"),
    "SessionFailed": ("episodes.errors", "SessionFailed"),
    "StepRejected": ("episodes.errors", "StepRejected"),
    "ServerUnreachable": ("episodes.errors", "ServerUnreachable"),
    "EnvironmentFailed": ("episodes.errors", "EnvironmentFailed"),
}

__all__ = [
    "ConfigError",
    "Environment",
    "EnvironmentFailed",
    "EpisodeFailed",
    "EpisodeResult",
    "EpisodeSpec",
    "EpisodesClient",
    "EpisodesError",
    "Group",
    "InteractiveSession",
    "ScoreResult",
    "ServerUnreachable",
    "SessionFailed",
    "SpecError",
    "StepOutcome",
    "StepRejected",
    "StepReply",
    "SyncEpisodesClient",
    "Task",
    "Termination",
    "Transcript",
    "TurnError",
    "TurnRecord",
    "connect",
    "load_spec",
    "parse_spec",
    "run_local",
]


def __getattr__(name: str) -> Any:
    try:
        module, attribute = _FACE[name]
    except KeyError:
        raise AttributeError(f"module 'episodes' has no attribute {name!r}") from None
    value = getattr(import_module(module), attribute)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_FACE})


if TYPE_CHECKING:  # what type checkers and IDEs see; never executed
    from episodes.client.blocking.client import SyncEpisodesClient
    from episodes.client.core import EpisodesClient, connect
    from episodes.client.group.stream import Group
    from episodes.client.interactive import InteractiveSession
    from episodes.envs.base import Environment
    from episodes.errors import (
        ConfigError,
        EnvironmentFailed,
        EpisodeFailed,
        EpisodesError,
        ServerUnreachable,
        SessionFailed,
        SpecError,
        StepRejected,
    )
    from episodes.local import run_episode_local as run_local
    from episodes.specfile import load_spec
    from episodes.types.io import StepReply
    from episodes.types.results import (
        EpisodeResult,
        ScoreResult,
        StepOutcome,
        Task,
        Termination,
        Transcript,
        TurnError,
        TurnRecord,
    )
    from episodes.types.spec import EpisodeSpec, parse_spec
