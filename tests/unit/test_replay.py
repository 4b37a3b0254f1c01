"""Saved histories replay on today's workflow code (no server needed).

Running episodes and saved histories must keep replaying whatever we refactor: a
change to the commands a workflow emits breaks them. The histories in `histories/`
were recorded by `histories/record.py`; re-record them only for a deliberate change.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from workflows import WORKFLOWS

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_saved_history_replays(path: Path) -> None:
    saved = json.loads(path.read_text())
    replayer = Replayer(workflows=WORKFLOWS, data_converter=pydantic_data_converter)
    for run in saved["runs"]:
        history = WorkflowHistory.from_json(saved["workflow_id"], run)
        await replayer.replay_workflow(history)


def test_every_workflow_has_a_saved_history() -> None:
    types = set()
    for path in HISTORIES:
        first = json.loads(path.read_text())["runs"][0]["events"][0]
        types.add(first["workflowExecutionStartedEventAttributes"]["workflowType"]["name"])
    assert types == {w.__temporal_workflow_definition.name for w in WORKFLOWS}  # type: ignore[attr-defined]
