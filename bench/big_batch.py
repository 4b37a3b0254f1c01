"""A 10,000-episode EvalBatchWorkflow: continue-as-new keeps every history bounded.

Not part of CI or of the default `python -m bench` set (it takes a while): run it by
name, `python -m bench big_batch` (10,000 short echo episodes) or with `--quick`
(200). One dev server, one in-process worker. Prints the largest history among the
batch's runs and among its episodes, in events and bytes, the wall time and the
episodes/s; every number is read from the server (describe / visibility).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from bench.common import ECHO, dev_server, running, script_spec
from episodes.client.batch.server import batch_input, start_batch, wait_batch
from episodes.client.connect import connect
from workers.worker import EpisodeWorker, WorkerOptions

# Temporal's own limits, for scale: 50 MB / 51,200 events per history.
LIMIT_EVENTS, LIMIT_BYTES = 51_200, 50 * 1024 * 1024


async def _history(client: Any, workflow_id: str, run_id: str | None) -> tuple[int, int]:
    desc = await client.get_workflow_handle(workflow_id, run_id=run_id).describe()
    info = desc.raw_description.workflow_execution_info
    return info.history_length, info.history_size_bytes


async def run(quick: bool = False, repeats: int | None = None) -> dict:
    episodes = 200 if quick else 10_000
    tasks, samples = (50, 4) if quick else (1000, 10)
    concurrency = 16 if quick else 64
    with dev_server() as server:
        client = await connect(server.address, timeout_s=30)
        queue = f"big-{uuid.uuid4().hex[:6]}"
        worker = EpisodeWorker(client, WorkerOptions(task_queue=queue, max_sessions=concurrency))
        spec = script_spec(2, ECHO, name="big", samples=samples)
        spec = spec.model_copy(
            update={
                "tasks": [
                    t.model_copy(update={"id": f"t{i}"}) for i in range(tasks) for t in spec.tasks
                ]
            }
        )
        async with running(worker):
            inp = batch_input(spec, batch_id=spec.name, concurrency=concurrency)
            t0 = time.perf_counter()
            handle = await start_batch(client, inp, task_queue=queue)
            last = [0.0]

            def progress(p: Any) -> None:
                if time.perf_counter() - last[0] > 30:
                    last[0] = time.perf_counter()
                    print(f"  {p.done}/{episodes} done, run {p.runs}", flush=True)

            result = await wait_batch(client, handle, on_progress=progress, interval_s=2)
            wall = time.perf_counter() - t0
        assert result.metrics.count == episodes, result.metrics.count
        runs = [e.run_id async for e in client.list_workflows(f"WorkflowId = '{handle.id}'")]
        batch_sizes = [await _history(client, handle.id, r) for r in runs]
        longest = None
        async for e in client.list_workflows(f"EpisodeBatch = '{spec.name}'"):
            if e.workflow_type != "EvalBatchWorkflow" and (
                longest is None or e.history_length > longest.history_length
            ):
                longest = e
        assert longest is not None
        episode_size = await _history(client, longest.id, longest.run_id)
    out = {
        "episodes": episodes,
        "wall_s": wall,
        "episodes_per_s": episodes / wall,
        "batch_runs": len(runs),
        "batch_max_events": max(n for n, _ in batch_sizes),
        "batch_max_bytes": max(b for _, b in batch_sizes),
        "episode_max_events": episode_size[0],
        "episode_max_bytes": episode_size[1],
        "terminations": dict(result.metrics.terminations),
    }
    print(
        f"big batch: {episodes} echo episodes (2 turns) in {wall:.1f} s = "
        f"{out['episodes_per_s']:.1f} episodes/s, concurrency {concurrency}\n"
        f"  batch: {len(runs)} runs (continue-as-new), largest history "
        f"{out['batch_max_events']} events / {out['batch_max_bytes'] / 1024:.0f} KiB\n"
        f"  episodes: largest history {episode_size[0]} events / {episode_size[1] / 1024:.0f} KiB"
        f" (Temporal's limits: {LIMIT_EVENTS} events / {LIMIT_BYTES // 2**20} MB)",
        flush=True,
    )
    return out
