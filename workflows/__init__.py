"""Deterministic workflow code. Import only models here (see DESIGN.md)."""

from workflows.episode import EpisodeWorkflow

WORKFLOWS = [EpisodeWorkflow]

__all__ = ["WORKFLOWS", "EpisodeWorkflow"]
