"""Search attributes that make episodes findable in the Temporal UI.

The dev server's SQLite visibility allows at most 10 Keyword and 3 of each other
type per namespace; these stay inside that. `episodes dev` registers them; on a
production server register them once with `temporal operator search-attribute create`.

Temporal-facing but sandbox-safe (`temporalio.common` and models only): workflows
import it to start children and upsert outcomes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

if TYPE_CHECKING:
    from episodes.types.results import Task
    from episodes.types.spec import EpisodeSpec

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


def episode_search_attributes(
    spec: EpisodeSpec, task: Task, batch: str, schedule: str | None = None
) -> TypedSearchAttributes:
    """What makes an episode (or a session) findable from its start; the workflow adds
    its outcome (termination, turns, reward) when it ends."""
    pairs = [
        SearchAttributePair(ENV, spec.env),
        SearchAttributePair(TASK, task.id),
        SearchAttributePair(BATCH, batch),
        SearchAttributePair(SPEC, spec.name),
    ]
    if schedule:
        pairs.append(SearchAttributePair(SCHEDULE, schedule))
    return TypedSearchAttributes(pairs)


def batch_search_attributes(
    spec: EpisodeSpec, batch: str | None, schedule: str | None = None
) -> TypedSearchAttributes:
    """What makes an EvalBatchWorkflow findable from its start (also a schedule's runs)."""
    pairs = [SearchAttributePair(SPEC, spec.name), SearchAttributePair(ENV, spec.env)]
    if batch:
        pairs.append(SearchAttributePair(BATCH, batch))
    if schedule:
        pairs.append(SearchAttributePair(SCHEDULE, schedule))
    return TypedSearchAttributes(pairs)
