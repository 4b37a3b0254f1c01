"""End to end on a real Temporal dev server: 5 MB and 20 MB strings through an activity and back.

Both are over Temporal's 2 MB per-payload limit. With
`data_converter(config)` (local storage + AES-GCM) on client and worker, the result
equals the input, the history holds only small references and ciphertext, and the
history replays.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import subprocess
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.worker import Replayer, Worker

with workflow.unsafe.imports_passed_through():
    from episodes.client.devserver import temporal_binary
    from episodes.payloads import AesGcmEncryption, LocalStorage, PayloadsConfig, data_converter
    from episodes.payloads.codec_server import start_codec_server

pytestmark = pytest.mark.slow

MARKER = "PLAINTEXT-MARKER-e2e"
THRESHOLD = 256 * 1024
KEYS = {"E2E_KEYS": "k1:" + base64.b64encode(b"E" * 32).decode()}


@activity.defn
async def echo_big(text: str) -> str:
    return text


@workflow.defn
class BigPayloadWorkflow:
    @workflow.run
    async def run(self, text: str) -> str:
        return await workflow.execute_activity(
            echo_big, text, start_to_close_timeout=timedelta(seconds=120)
        )


def payloads_in(message, found: list) -> list:  # type: ignore[no-untyped-def]
    """Every temporal.api.common.v1.Payload anywhere inside a proto message."""
    if message.DESCRIPTOR.full_name == "temporal.api.common.v1.Payload":
        found.append(message)
        return found
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        if field.message_type.GetOptions().map_entry:
            items = value.values()
        elif hasattr(value, "DESCRIPTOR"):
            items = [value]
        else:
            items = list(value)  # a repeated message field
        for item in items:
            if hasattr(item, "DESCRIPTOR"):
                payloads_in(item, found)
    return found


def cli_payload_texts(output: str) -> str:
    """The decoded data of every payload in `temporal ... -o json` output (proto JSON: base64)."""
    texts: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("metadata"), dict) and isinstance(node.get("data"), str):
                texts.append(base64.b64decode(node["data"]).decode(errors="replace"))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(json.loads(output))
    return "\n".join(texts)


@pytest.mark.parametrize("size", [5 * 1024 * 1024, 20 * 1024 * 1024], ids=["5MB", "20MB"])
async def test_big_strings_round_trip_encrypted_and_offloaded(
    dev_server, client, tmp_path: Path, size: int
) -> None:  # type: ignore[no-untyped-def]
    store = tmp_path / "payloads"
    config = PayloadsConfig(
        storage=LocalStorage(path=store, threshold_bytes=THRESHOLD),
        encryption=AesGcmEncryption(keys_env="E2E_KEYS"),
    )
    dc = data_converter(config, environ=KEYS)
    # `client` (the suite's) only proves the server is up; ours carries the converter.
    ours = await Client.connect(dev_server.address, data_converter=dc)
    text = MARKER + os.urandom((size - len(MARKER)) // 2 + 1).hex()[: size - len(MARKER)]
    assert len(text) == size
    queue = f"payloads-e2e-{uuid.uuid4().hex[:8]}"
    async with Worker(
        ours, task_queue=queue, workflows=[BigPayloadWorkflow], activities=[echo_big]
    ):
        handle = await ours.start_workflow(
            BigPayloadWorkflow.run,
            text,
            id=f"big-payload-{uuid.uuid4().hex[:8]}",
            task_queue=queue,
            execution_timeout=timedelta(minutes=3),
        )
        result = await handle.result()
    assert hashlib.sha256(result.encode()).digest() == hashlib.sha256(text.encode()).digest()

    history = await ours.get_workflow_handle(handle.id).fetch_history()
    payloads = [p for event in history.events for p in payloads_in(event, [])]
    # Input, activity input, activity result, workflow result: all four offloaded.
    refs = [p for p in payloads if p.external_payloads]
    assert len(refs) >= 4
    assert all(p.ByteSize() < THRESHOLD for p in payloads)
    assert sum(e.ByteSize() for e in history.events) < 64 * 1024
    for event in history.events:
        assert MARKER.encode() not in event.SerializeToString()
    # What was stored is ciphertext too.
    blobs = [p for p in store.rglob("*") if p.is_file()]
    assert blobs and all(MARKER.encode() not in b.read_bytes() for b in blobs)

    # The history replays with the same converter (stored payloads are fetched again).
    replay = await Replayer(
        workflows=[BigPayloadWorkflow], data_converter=dc, debug_mode=True
    ).replay_workflow(history)
    assert replay.replay_failure is None


@activity.defn
async def fail_with_secret(secret: str) -> None:
    raise ApplicationError(f"tool crashed, stderr: {secret}", non_retryable=True)


@workflow.defn
class FailingWorkflow:
    @workflow.run
    async def run(self, secret: str) -> str:
        try:
            await workflow.execute_activity(
                fail_with_secret, secret, start_to_close_timeout=timedelta(seconds=30)
            )
        except ActivityError as e:
            return str(e.cause)
        return "no failure"


async def test_failure_messages_are_encrypted_too(dev_server, client) -> None:  # type: ignore[no-untyped-def]
    dc = data_converter(
        PayloadsConfig(encryption=AesGcmEncryption(keys_env="E2E_KEYS")), environ=KEYS
    )
    ours = await Client.connect(dev_server.address, data_converter=dc)
    queue = f"payloads-fail-{uuid.uuid4().hex[:8]}"
    async with Worker(
        ours, task_queue=queue, workflows=[FailingWorkflow], activities=[fail_with_secret]
    ):
        handle = await ours.start_workflow(
            FailingWorkflow.run, MARKER, id=f"fail-{uuid.uuid4().hex[:8]}", task_queue=queue
        )
        # The workflow (through the converter) still reads the real message ...
        assert MARKER in await handle.result()
    # ... but the history does not hold it.
    history = await handle.fetch_history()
    for event in history.events:
        assert MARKER.encode() not in event.SerializeToString()

    # The real Temporal CLI, through our codec server, shows the plaintext again.
    server = await start_codec_server(
        PayloadsConfig(encryption=AesGcmEncryption(keys_env="E2E_KEYS")),
        "127.0.0.1",
        0,
        auth="Bearer e2e",
        environ=KEYS,
    )
    try:
        argv = [temporal_binary(), "workflow", "show", "-w", handle.id, "-o", "json"]
        argv += ["--address", dev_server.address, "--codec-auth", "Bearer e2e"]
        shown = await asyncio.to_thread(
            subprocess.run,
            [*argv, "--codec-endpoint", server.url + "/{namespace}"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert shown.returncode == 0, shown.stderr
        assert MARKER in cli_payload_texts(shown.stdout)
        plain = await asyncio.to_thread(
            subprocess.run, argv, capture_output=True, text=True, timeout=60
        )
        assert plain.returncode == 0 and MARKER not in cli_payload_texts(plain.stdout)
    finally:
        await server.aclose()
