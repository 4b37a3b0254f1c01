"""Deterministic workflow code.

Workflow modules import only temporalio, the standard library and models
(`episodes.contract`, `episodes.messages`, `episodes.models`, ...), and pass only
those through the sandbox (`tests/unit/test_layering.py`).
"""

from workflows.batch import EvalBatchWorkflow
from workflows.episode import EpisodeWorkflow
from workflows.interactive import InteractiveEpisodeWorkflow

WORKFLOWS = [EpisodeWorkflow, InteractiveEpisodeWorkflow, EvalBatchWorkflow]

__all__ = ["WORKFLOWS", "EpisodeWorkflow", "EvalBatchWorkflow", "InteractiveEpisodeWorkflow"]
