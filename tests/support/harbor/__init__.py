"""The Harbor test dataset (`tasks/`) and the base images its tasks build FROM."""

from __future__ import annotations

from pathlib import Path

TASKS = Path(__file__).resolve().parent / "tasks"
