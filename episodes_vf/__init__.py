"""The `episodes-vf` verifiers taskset: `[env.taskset] id = "episodes-vf"` imports this.

verifiers finds a taskset by its id as a package (`episodes-vf` -> `episodes_vf`) that
exports one Taskset and one Env subclass in `__all__`; they live in
`episodes.integrations.verifiers`.
"""

from episodes.integrations.verifiers import (
    EpisodesEnv,
    EpisodesEnvConfig,
    EpisodesTask,
    EpisodesTaskData,
    EpisodesTaskset,
    EpisodesTasksetConfig,
)

__all__ = [
    "EpisodesEnv",
    "EpisodesEnvConfig",
    "EpisodesTask",
    "EpisodesTaskData",
    "EpisodesTaskset",
    "EpisodesTasksetConfig",
]
