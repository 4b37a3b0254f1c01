"""Search attributes that make episodes findable in the Temporal UI.

The dev server's SQLite visibility allows at most 10 Keyword and 3 of each other
type per namespace; these stay inside that. `episodes dev` registers them; on a
production server register them once with `temporal operator search-attribute create`.
"""

from __future__ import annotations

from temporalio.common import SearchAttributeKey

ENV = SearchAttributeKey.for_keyword("EpisodeEnv")
TASK = SearchAttributeKey.for_keyword("EpisodeTask")
BATCH = SearchAttributeKey.for_keyword("EpisodeBatch")
SPEC = SearchAttributeKey.for_keyword("EpisodeSpec")
TERMINATION = SearchAttributeKey.for_keyword("EpisodeTermination")
SCHEDULE = SearchAttributeKey.for_keyword("EpisodeSchedule")
REWARD = SearchAttributeKey.for_float("EpisodeReward")
TURNS = SearchAttributeKey.for_int("EpisodeTurns")

ALL = [ENV, TASK, BATCH, SPEC, TERMINATION, SCHEDULE, REWARD, TURNS]

# name -> the type word the Temporal CLI takes (`--search-attribute NAME=TYPE`).
CLI_TYPES = {
    "EpisodeEnv": "Keyword",
    "EpisodeTask": "Keyword",
    "EpisodeBatch": "Keyword",
    "EpisodeSpec": "Keyword",
    "EpisodeTermination": "Keyword",
    "EpisodeSchedule": "Keyword",
    "EpisodeReward": "Double",
    "EpisodeTurns": "Int",
}
