"""Whole turns through a real dev server with local storage: nothing truncated, every byte back.

A worker and a client share `configured_data_converter` (EPISODES_PAYLOADS_STORAGE=local,
as `episodes dev` sets by default). A 5 MB reply, a 20 MB harness event and 200 turns
of 1 MB each complete; `EpisodesClient.transcript` and the real `episodes show --json`
return every byte (sha256); no history comes near Temporal's limits (each payload
inline stays under the threshold, each history far under 50 MB), and the largest one
is printed (events and bytes).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from episodes.client import EpisodesClient
from episodes.client.connect import connect
from episodes.payloads.settings import configured_data_converter
from episodes.types.spec import parse_spec
from tests.episodes.payloads.test_e2e_temporal import payloads_in
from tests.support.harnesses.payload_harness import blob

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[3]
HARNESS = ROOT / "tests" / "support" / "harnesses" / "payload_harness.py"
MB = 1024 * 1024
THRESHOLD = 256 * 1024
SDK_PAYLOAD_LIMIT = 2 * MB
SDK_HISTORY_LIMIT = 50 * MB
LARGEST: dict[str, Any] = {}


@pytest.fixture(scope="module")
async def stored(dev_server, tmp_path_factory):  # type: ignore[no-untyped-def]
    from workers.worker import EpisodeWorker, WorkerOptions

    store = tmp_path_factory.mktemp("payloads")
    env = {"EPISODES_PAYLOADS_STORAGE": "local", "EPISODES_PAYLOADS_PATH": str(store)}
    client = await connect(
        dev_server.address, timeout_s=30, data_converter=configured_data_converter(environ=env)
    )
    queue = f"sizes-{uuid.uuid4().hex[:6]}"
    worker = EpisodeWorker(client, WorkerOptions(task_queue=queue))
    assert worker.activities.history_limit_bytes is None  # turns are recorded whole
    running = asyncio.create_task(worker.run())
    yield client, queue, env
    worker.request_stop()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait_for(running, 60)
    if LARGEST:
        print(
            f"\nlargest history: {LARGEST['events']} events, {LARGEST['bytes']} bytes "
            f"({LARGEST['case']}, {LARGEST['runs']} run(s))"
        )


def _spec(name: str, messages: list[dict[str, Any]], **over: Any):  # type: ignore[no-untyped-def]
    return parse_spec(
        {
            "name": name,
            "env": "script",
            "tasks": [{"id": "t0", "data": {"messages": messages}}],
            "harness": {
                "command": [sys.executable, str(HARNESS)],
                "max_packet_bytes": 64 * MB,
                "stop_timeout_s": 2.0,
            },
            "max_turns": len(messages),
            "turn_timeout_s": 60.0,
            **over,
        }
    )


def _sha(value: Any) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


async def _histories(client: Client, workflow_id: str) -> list[Any]:
    """Every run's history, oldest first."""
    out, run_id = [], None
    async for ev in client.get_workflow_handle(workflow_id).fetch_history_events(page_size=1):
        run_id = ev.workflow_execution_started_event_attributes.first_execution_run_id
        break
    while run_id:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        out.append(history)
        run_id = None
        for ev in history.events:
            if ev.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
                run_id = (
                    ev.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
                )
    return out


async def _check_histories(client: Client, workflow_id: str, case: str) -> None:
    histories = await _histories(client, workflow_id)
    for history in histories:
        payloads = [p for event in history.events for p in payloads_in(event, [])]
        assert any(p.external_payloads for p in payloads)  # big turns left as references
        assert all(p.ByteSize() < THRESHOLD for p in payloads)
        assert all(e.ByteSize() < SDK_PAYLOAD_LIMIT for e in history.events)
        size = sum(e.ByteSize() for e in history.events)
        assert size < SDK_HISTORY_LIMIT // 10
        if size > LARGEST.get("bytes", 0):
            LARGEST.update(events=len(history.events), bytes=size, case=case, runs=len(histories))
        print(f"{case}: history {len(history.events)} events, {size} bytes")


def _show_json(address: str, workflow_id: str, env: dict[str, str], cwd: Path) -> dict[str, Any]:
    """The real CLI, as a user runs it, with the same payload settings."""
    shown = subprocess.run(
        [
            sys.executable,
            "-m",
            "episodes.cli.main",
            "show",
            workflow_id,
            "--address",
            address,
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
        cwd=cwd,
    )
    assert shown.returncode == 0, shown.stderr[-2000:]
    return json.loads(shown.stdout)


async def _run(stored, name: str, messages: list[dict[str, Any]]) -> tuple[str, dict, dict]:  # type: ignore[no-untyped-def]
    client, queue, _ = stored
    ec = EpisodesClient(client, task_queue=queue)
    s = _spec(f"{name}-{uuid.uuid4().hex[:6]}", messages)
    result = await ec.run_episode(s, s.tasks[0])
    assert result.termination == "env_done", result.error
    assert result.turns == len(messages)
    # What a trainer gets (EpisodesClient.transcript), in the shape `show --json` prints.
    transcript = await ec.transcript(result.workflow_id)
    data = {"turns": [{"record": rec.model_dump(mode="json")} for rec in transcript.turns]}
    return result.workflow_id, data, {}


async def test_a_5mb_reply_is_recorded_whole(stored, dev_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    wid, data, _ = await _run(stored, "reply5", [{"seed": "r5", "reply_bytes": 5 * MB}])
    want = _sha(blob("r5", 5 * MB))
    assert _sha(data["turns"][0]["record"]["reply"]["blob"]) == want
    shown = _show_json(dev_server.address, wid, stored[2], tmp_path)
    assert _sha(shown["turns"][0]["record"]["reply"]["blob"]) == want
    await _check_histories(stored[0], wid, "5 MB reply")


async def test_a_20mb_event_is_recorded_whole(stored, dev_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    msg = {"seed": "e20", "event_bytes": 20 * MB, "reply_bytes": 10}
    wid, data, _ = await _run(stored, "event20", [msg])
    want = _sha(blob("e20-event", 20 * MB))
    [event] = data["turns"][0]["record"]["events"]
    assert _sha(event["blob"]) == want
    shown = _show_json(dev_server.address, wid, stored[2], tmp_path)
    assert _sha(shown["turns"][0]["record"]["events"][0]["blob"]) == want
    await _check_histories(stored[0], wid, "20 MB event")


async def test_200_turns_of_1mb_each_are_all_recorded(stored, dev_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    messages = [{"seed": f"t{i}", "reply_bytes": MB} for i in range(200)]
    wid, data, _ = await _run(stored, "long200", messages)
    turns = data["turns"]
    assert len(turns) == 200
    for i, turn in enumerate(turns):
        assert turn["record"]["turn"] == i
        assert _sha(turn["record"]["reply"]["blob"]) == _sha(blob(f"t{i}", MB)), i
    shown = _show_json(dev_server.address, wid, stored[2], tmp_path)
    assert [_sha(t["record"]["reply"]["blob"]) for t in shown["turns"]] == [
        _sha(t["record"]["reply"]["blob"]) for t in turns
    ]
    await _check_histories(stored[0], wid, "200 x 1 MB")
