"""Deterministic workflow code. Import only models here (see DESIGN.md)."""

from workflows.batch import EvalBatchWorkflow
from workflows.episode import EpisodeWorkflow
from workflows.interactive import InteractiveEpisodeWorkflow

WORKFLOWS = [EpisodeWorkflow, InteractiveEpisodeWorkflow, EvalBatchWorkflow]

__all__ = ["WORKFLOWS", "EpisodeWorkflow", "EvalBatchWorkflow", "InteractiveEpisodeWorkflow"]
