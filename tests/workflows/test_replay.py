"""Saved histories replay on today's workflow code (no server needed).

Running episodes and saved histories must keep replaying whatever we refactor: a
change to the commands a workflow emits breaks them. The histories in `histories/`
were recorded by `histories/record.py`; re-record them only for a deliberate change.

They were written with the plain pydantic converter (no storage, no codec): they
must replay both with the configured converter and with external storage +
AES-GCM turned on (a deployment that enables encryption keeps its old histories).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.converter import DataConverter
from temporalio.worker import Replayer

from episodes.payloads import AesGcmEncryption, LocalStorage, PayloadsConfig, data_converter
from episodes.payloads.settings import configured_data_converter
from workflows import WORKFLOWS

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))


def _converter(kind: str, tmp_path: Path) -> DataConverter:
    if kind == "configured":
        return configured_data_converter(environ={})
    keys = {"REPLAY_KEYS": "r1:" + base64.b64encode(b"R" * 32).decode()}
    config = PayloadsConfig(
        storage=LocalStorage(path=tmp_path / "payloads"),
        encryption=AesGcmEncryption(keys_env="REPLAY_KEYS"),
    )
    return data_converter(config, environ=keys)


@pytest.mark.parametrize("kind", ["configured", "storage+aes-gcm"])
@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_saved_history_replays(path: Path, kind: str, tmp_path: Path) -> None:
    saved = json.loads(path.read_text())
    replayer = Replayer(
        workflows=WORKFLOWS, data_converter=_converter(kind, tmp_path), debug_mode=True
    )
    for run in saved["runs"]:
        history = WorkflowHistory.from_json(saved["workflow_id"], run)
        await replayer.replay_workflow(history)


def test_every_workflow_has_a_saved_history() -> None:
    types = set()
    for path in HISTORIES:
        first = json.loads(path.read_text())["runs"][0]["events"][0]
        types.add(first["workflowExecutionStartedEventAttributes"]["workflowType"]["name"])
    assert types == {w.__temporal_workflow_definition.name for w in WORKFLOWS}  # type: ignore[attr-defined]
