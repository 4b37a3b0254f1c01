"""The viewer's first render: a 1,000-episode batch page and a 1,000-turn episode page.

Time to first render is the time to the API's first page of data (what the page waits
for before it draws), cold (the viewer's cache empty) and warm; bytes are what the
browser transfers for it. Beside it, what the Temporal UI fetches to show the same
episode: its history JSON through the UI server's HTTP API (`/api/v1/.../history`,
the latest run, as the UI opens it), and the history bytes of every run of the chain
(GetWorkflowExecutionHistory through the SDK), which a reader of the whole episode
needs there. `--quick`: 100 episodes and a 200-turn episode.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
import urllib.parse
import uuid
from pathlib import Path
from typing import Any

import httpx

from bench.common import ECHO, running, script_spec, spread, table
from episodes.client import EpisodesClient
from episodes.client.connect import connect
from episodes.client.devserver import DevServer
from episodes.viewer import serve
from workers.worker import EpisodeWorker, WorkerOptions


async def _timed_get(http: httpx.AsyncClient, path: str, **params: Any) -> tuple[float, int]:
    t0 = time.perf_counter()
    resp = await http.get(path, params=params)
    body = resp.content
    resp.raise_for_status()
    return (time.perf_counter() - t0) * 1000, len(body)


async def _batch(client: Any, queue: str, n: int) -> str:
    name = f"vbench-{uuid.uuid4().hex[:6]}"
    spec = script_spec(1, ECHO, name=name)
    ec = EpisodesClient(client, task_queue=queue)
    gate = asyncio.Semaphore(64)

    async def one(k: int) -> None:
        async with gate:
            await ec.run_episode(spec, spec.tasks[0], k, batch_id=name)

    await asyncio.gather(*(one(k) for k in range(n)))
    query = f'EpisodeBatch = "{name}" AND EpisodeTermination = "env_done"'
    for _ in range(300):  # visibility catches up with the last completions
        if (await client.count_workflows(query)).count == n:
            break
        await asyncio.sleep(0.2)
    return name


async def _chain_bytes(client: Any, wid: str) -> tuple[int, int, str]:
    """(history bytes of every run, runs, the latest run's id) via the SDK."""
    total = runs = 0
    run_id: str | None = None
    async for ev in client.get_workflow_handle(wid).fetch_history_events(page_size=1):
        run_id = ev.workflow_execution_started_event_attributes.first_execution_run_id
        break
    latest = run_id or ""
    while run_id:
        history = await client.get_workflow_handle(wid, run_id=run_id).fetch_history()
        total += sum(ev.ByteSize() for ev in history.events)
        runs += 1
        latest, run_id = run_id, None
        for ev in history.events:
            attrs = ev.workflow_execution_continued_as_new_event_attributes
            if attrs.new_execution_run_id:
                run_id = attrs.new_execution_run_id
    return total, runs, latest


async def _ui_history(ui: str, wid: str, run_id: str) -> tuple[float, int] | None:
    """The Temporal UI's own fetch of one run's history (its HTTP API), or None."""
    path = f"/api/v1/namespaces/default/workflows/{urllib.parse.quote(wid, safe='')}/history"
    total_ms, total = 0.0, 0
    token = ""
    async with httpx.AsyncClient(base_url=ui, timeout=60) as http:
        for _ in range(1000):  # the UI pages through the history
            params = {"execution.runId": run_id, "nextPageToken": token}
            t0 = time.perf_counter()
            try:
                resp = await http.get(path, params={k: v for k, v in params.items() if v})
            except httpx.HTTPError:
                return None
            total_ms += (time.perf_counter() - t0) * 1000
            if resp.status_code != 200:
                return None
            total += len(resp.content)
            token = resp.json().get("nextPageToken") or ""
            if not token:
                return total_ms, total
    return total_ms, total


async def run(quick: bool = False, repeats: int | None = None) -> dict:
    episodes, turns = (100, 200) if quick else (1000, 1000)
    repeats = repeats or (2 if quick else 5)
    queue = f"vbench-{uuid.uuid4().hex[:6]}"
    with tempfile.TemporaryDirectory(prefix="episodes-bench-") as tmp:
        server = DevServer(auto_port=True, db_file=Path(tmp) / "t.db", log_file=Path(tmp) / "s.log")
        await asyncio.to_thread(server.start)
        try:
            client = await connect(server.address, timeout_s=30)
            worker = EpisodeWorker(client, WorkerOptions(task_queue=queue, max_sessions=128))
            async with running(worker):
                print(
                    f"  running {episodes} one-turn episodes and a {turns}-turn episode", flush=True
                )
                batch = await _batch(client, queue, episodes)
                spec = script_spec(turns, ECHO, name=f"vlong-{uuid.uuid4().hex[:6]}")
                long = await EpisodesClient(client, task_queue=queue).run_episode(
                    spec, spec.tasks[0]
                )
            figures = await _measure(client, server.ui_url or "", batch, long.workflow_id, repeats)
        finally:
            await asyncio.to_thread(server.stop)
    figures.update(episodes=episodes, turns=turns)
    _print(figures)
    return {"figures": figures}


async def _measure(client: Any, ui: str, batch: str, wid: str, repeats: int) -> dict[str, Any]:
    batch_ms: list[float] = []
    cold_ms: list[float] = []
    warm_ms: list[float] = []
    sizes: dict[str, int] = {}
    for _ in range(repeats):
        # A fresh viewer each time: the episode's first page is read cold.
        async with (
            serve(client, port=0) as v,
            httpx.AsyncClient(base_url=v.url, timeout=120) as http,
        ):
            ms, sizes["batch_bytes"] = await _timed_get(http, "/api/batch", id=batch)
            batch_ms.append(ms)
            ms, sizes["episode_bytes"] = await _timed_get(http, "/api/episode", id=wid, limit=50)
            cold_ms.append(ms)
            ms, _ = await _timed_get(http, "/api/episode", id=wid, offset=50, limit=50)
            warm_ms.append(ms)
    chain, runs, latest = await _chain_bytes(client, wid)
    ui_fetch = None
    with contextlib.suppress(Exception):
        ui_fetch = await _ui_history(ui, wid, latest) if ui else None
    return {
        "batch_page_ms": spread(batch_ms),
        "episode_first_page_cold_ms": spread(cold_ms),
        "episode_next_page_warm_ms": spread(warm_ms),
        **sizes,
        "history_bytes_all_runs": chain,
        "runs": runs,
        "ui_history_ms": ui_fetch[0] if ui_fetch else None,
        "ui_history_bytes": ui_fetch[1] if ui_fetch else None,
    }


def _print(f: dict[str, Any]) -> None:
    def ms(s: dict[str, float]) -> str:
        return f"{s['median']:.0f} ms (min {s['min']:.0f}, max {s['max']:.0f})"

    rows = [
        [
            f"viewer: batch page ({f['episodes']} episodes)",
            ms(f["batch_page_ms"]),
            f"{f['batch_bytes']:,}",
        ],
        [
            f"viewer: episode first page ({f['turns']} turns, cold)",
            ms(f["episode_first_page_cold_ms"]),
            f"{f['episode_bytes']:,}",
        ],
        ["viewer: next page (warm)", ms(f["episode_next_page_warm_ms"]), ""],
        [
            "Temporal UI: history JSON (latest run)",
            f"{f['ui_history_ms']:.0f} ms" if f["ui_history_ms"] is not None else "n/a",
            f"{f['ui_history_bytes']:,}" if f["ui_history_bytes"] is not None else "n/a",
        ],
        [
            f"history, every run ({f['runs']} runs, SDK bytes)",
            "",
            f"{f['history_bytes_all_runs']:,}",
        ],
    ]
    print(table(rows, ["what", "time to data", "bytes"]))
