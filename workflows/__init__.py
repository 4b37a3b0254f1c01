"""Deterministic workflow code.

Workflow modules import only temporalio, the standard library and models
(`episodes.types`, `episodes.contract`, `episodes.search_attributes`), and pass only
those through the sandbox (`tests/test_layering.py`).

The names below load on first use: the SDK's sandbox (the replay tests', and a worker's
with `workflow_sandbox` on) imports a workflow's module afresh for every workflow run,
and an `EpisodeWorkflow` run should not execute the interactive and batch modules too
(issue 13: that was a third of the worker's workflow CPU).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workflows.batch import EvalBatchWorkflow
    from workflows.episode import EpisodeWorkflow
    from workflows.group import EpisodeGroupWorkflow
    from workflows.interactive import InteractiveEpisodeWorkflow
    from workflows.receipts import BatchReceiptsWorkflow

    WORKFLOWS: list[type]

__all__ = [
    "WORKFLOWS",
    "BatchReceiptsWorkflow",
    "EpisodeGroupWorkflow",
    "EpisodeWorkflow",
    "EvalBatchWorkflow",
    "InteractiveEpisodeWorkflow",
]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'workflows' has no attribute {name!r}")
    from workflows.batch import EvalBatchWorkflow
    from workflows.episode import EpisodeWorkflow
    from workflows.group import EpisodeGroupWorkflow
    from workflows.interactive import InteractiveEpisodeWorkflow
    from workflows.receipts import BatchReceiptsWorkflow

    found = {
        "EpisodeWorkflow": EpisodeWorkflow,
        "InteractiveEpisodeWorkflow": InteractiveEpisodeWorkflow,
        "EvalBatchWorkflow": EvalBatchWorkflow,
        "EpisodeGroupWorkflow": EpisodeGroupWorkflow,
        "BatchReceiptsWorkflow": BatchReceiptsWorkflow,
        "WORKFLOWS": [
            EpisodeWorkflow,
            InteractiveEpisodeWorkflow,
            EvalBatchWorkflow,
            EpisodeGroupWorkflow,
            BatchReceiptsWorkflow,
        ],
    }
    return found[name]
