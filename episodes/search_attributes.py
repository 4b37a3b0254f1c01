"""Search attributes that make episodes findable in the Temporal UI.

The dev server's SQLite visibility allows at most 10 Keyword and 3 of each other
type per namespace; these stay inside that. `episodes dev` registers them; on a
production server register them once with `temporal operator search-attribute create`.

Temporal-facing but sandbox-safe (`temporalio.common` and models only): workflows
import it to start children and upsert outcomes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from temporalio.common import (
    Priority,
    SearchAttributeKey,
    SearchAttributePair,
    TypedSearchAttributes,
)

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
# A batch's place on shared workers (spec.priority, spec.fairness_key), when set.
PRIORITY = SearchAttributeKey.for_int("EpisodePriority")
FAIRNESS = SearchAttributeKey.for_keyword("EpisodeFairnessKey")

ALL = [ENV, TASK, BATCH, SPEC, TERMINATION, SCHEDULE, REWARD, TURNS, PRIORITY, FAIRNESS]

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
    "EpisodePriority": "Int",
    "EpisodeFairnessKey": "Keyword",
}


def task_priority(spec: EpisodeSpec) -> Priority:
    """Temporal's task priority for a batch's workflows (the server hands it down to
    their children and activities): `Priority.default` when the spec sets none."""
    if spec.priority is None and spec.fairness_key is None and spec.fairness_weight is None:
        return Priority.default
    return Priority(
        priority_key=spec.priority,
        fairness_key=spec.fairness_key,
        fairness_weight=spec.fairness_weight,
    )


def _priority_pairs(spec: EpisodeSpec) -> list[SearchAttributePair]:
    pairs: list[SearchAttributePair] = []
    if spec.priority is not None:
        pairs.append(SearchAttributePair(PRIORITY, spec.priority))
    if spec.fairness_key is not None:
        pairs.append(SearchAttributePair(FAIRNESS, spec.fairness_key))
    return pairs


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
    return TypedSearchAttributes(pairs + _priority_pairs(spec))


def batch_search_attributes(
    spec: EpisodeSpec, batch: str | None, schedule: str | None = None
) -> TypedSearchAttributes:
    """What makes an EvalBatchWorkflow findable from its start (also a schedule's runs)."""
    pairs = [SearchAttributePair(SPEC, spec.name), SearchAttributePair(ENV, spec.env)]
    if batch:
        pairs.append(SearchAttributePair(BATCH, batch))
    if schedule:
        pairs.append(SearchAttributePair(SCHEDULE, schedule))
    return TypedSearchAttributes(pairs + _priority_pairs(spec))
