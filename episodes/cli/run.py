"""`episodes run SPEC`: every task x sample through Temporal, with progress and a summary."""

from __future__ import annotations

import contextlib
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from episodes.cli.common import console, summary_table
from episodes.client import EpisodesClient
from episodes.connect import connect
from episodes.models import EpisodeResult
from episodes.spec import load_spec


async def run_spec(
    path: Path,
    *,
    address: str | None,
    namespace: str,
    task_queue: str,
    out: Path | None,
    batch: str | None,
    concurrency: int | None,
) -> list[EpisodeResult]:
    from episodes.envs import check_env_ref

    # Everything that can be wrong with the spec is found before anything starts.
    spec = load_spec(path)
    check_env_ref(spec.env)
    tasks = spec.load_tasks()
    total = len(tasks) * spec.samples

    async with contextlib.AsyncExitStack() as stack:
        ui_url = None
        if address is None:
            from episodes.cli.embedded import embedded_stack

            with console.status("starting the embedded Temporal dev server and a worker"):
                emb = await stack.enter_async_context(
                    embedded_stack(task_queue=task_queue, namespace=namespace)
                )
            client, ui_url = emb.client, emb.server.ui_url
        else:
            client = await connect(address, namespace=namespace)
        sink = stack.enter_context(out.open("w")) if out else None
        results: list[EpisodeResult] = []
        episodes = EpisodesClient(client, task_queue=task_queue)
        with Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[last]}"),
            TimeElapsedColumn(),
            console=console,
        ) as progress:
            bar = progress.add_task(spec.name, total=total, last="")
            async for result in episodes.run_batch(spec, concurrency=concurrency, batch=batch):
                results.append(result)
                if sink:
                    sink.write(result.model_dump_json() + "\n")
                    sink.flush()
                reward = "-" if result.reward is None else f"{result.reward:.2f}"
                progress.update(
                    bar,
                    advance=1,
                    last=f"{result.task_id}#{result.sample} {result.termination} {reward}",
                )
        console.print(summary_table(results, title=f"{spec.name}: {total} episodes"))
        if out:
            console.print(f"results: {out}")
        if ui_url:
            console.print(f"Temporal UI: {ui_url} (histories kept in .episodes/)")
        return results
