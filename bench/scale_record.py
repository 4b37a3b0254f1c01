"""How an episode's record grows with its model calls (part of `bench.agents_scale`).

Two episodes through a real dev server and an in-process worker, external storage on
(a local directory, so no turn is capped): 10 and 20 turns of `harnesses/chatty.py`,
10 model calls a turn, one conversation growing by a 2 KB user message and the
answer per call (the canned upstream of `bench.scale_procs`). Bytes recorded = the
workflow history (protobuf, every event) + the payloads it stored outside (files
added to the storage directory). An O(n) record gives ~2x at twice the calls; one
that keeps each call's whole conversation gives ~4x.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.agents_scale import upstream_proc
from bench.common import HERE, dev_server, ratio, running, script_spec
from episodes.client.connect import connect
from episodes.payloads import LocalStorage, PayloadsConfig, data_converter
from episodes.types.io import EpisodeInput
from episodes.types.results import EpisodeResult
from workers.worker import EpisodeWorker, WorkerOptions

CHATTY = [sys.executable, str(HERE / "harnesses" / "chatty.py")]
CALLS_PER_TURN = 10


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


async def _episode(client: Any, queue: str, base_url: str, store: Path, calls: int) -> dict:
    turns = calls // CALLS_PER_TURN
    spec = script_spec(
        turns,
        CHATTY,
        name=f"record{calls}",
        model={"base_url": base_url, "model": "m"},
    )
    spec.harness.env["CHATTY_CALLS"] = str(CALLS_PER_TURN)
    before = _dir_bytes(store)
    t0 = time.perf_counter()
    handle = await client.start_workflow(
        "EpisodeWorkflow",
        EpisodeInput(spec=spec, task=spec.tasks[0]),
        id=f"{spec.name}-{uuid.uuid4().hex[:8]}",
        task_queue=queue,
        result_type=EpisodeResult,
    )
    result = await handle.result()
    seconds = time.perf_counter() - t0
    if result.termination != "env_done" or result.turns != turns:
        raise RuntimeError(f"record bench: {result.termination} after {result.turns} turns")
    history = await handle.fetch_history()
    history_bytes = sum(e.ByteSize() for e in history.events)
    stored = _dir_bytes(store) - before
    transcript = await client_transcript(client, handle.id)
    got = len(transcript.model_calls())
    if got != calls:
        raise RuntimeError(f"record bench: {got} model calls read back, {calls} made")
    last = transcript.model_calls()[-1].messages
    return {
        "calls": calls,
        "history_bytes": history_bytes,
        "stored_bytes": stored,
        "recorded_bytes": history_bytes + stored,
        "seconds": seconds,
        "last_call_messages": len(last),
    }


async def client_transcript(client: Any, workflow_id: str) -> Any:
    from episodes.client.histories.transcript import fetch_transcript

    return await fetch_transcript(client, workflow_id)


async def run(quick: bool = False, repeats: int | None = None) -> dict[str, Any]:
    sizes = (20, 40) if quick else (100, 200)
    queue = f"rec-{uuid.uuid4().hex[:6]}"
    with dev_server() as server, tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "payloads"
        store.mkdir()
        conv = data_converter(PayloadsConfig(storage=LocalStorage(path=store)))
        client = await connect(server.address, timeout_s=30, data_converter=conv)
        worker = EpisodeWorker(client, WorkerOptions(task_queue=queue))
        async with upstream_proc(1) as base_url, running(worker):
            small = await _episode(client, queue, base_url, store, sizes[0])
            big = await _episode(client, queue, base_url, store, sizes[1])
    growth = ratio(big["recorded_bytes"], small["recorded_bytes"])
    mib = 1024 * 1024
    print(
        f"  record: {sizes[0]} calls {small['recorded_bytes'] / mib:.2f} MiB "
        f"(history {small['history_bytes'] / mib:.2f}), {sizes[1]} calls "
        f"{big['recorded_bytes'] / mib:.2f} MiB (history {big['history_bytes'] / mib:.2f}): "
        f"{growth:.2f}x (load {os.getloadavg()[0]:.2f})"
    )
    return {
        "figures": {"record": {"small": small, "big": big}},
        "ratios": {f"record_growth_{sizes[1]}_vs_{sizes[0]}": growth},
    }
