"""`episodes run SPEC`: every task x sample through Temporal, with progress and a summary."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from episodes.cli.common import console, progress_bar, summary_table
from episodes.cli.embedded import client_for
from episodes.client import EpisodesClient
from episodes.client.config import Config
from episodes.client.dispatch import dispatch_spec
from episodes.specfile import load_spec
from episodes.types.results import EpisodeResult


async def run_spec(
    path: Path,
    *,
    cfg: Config,
    out: Path | None,
    batch: str | None,
    concurrency: int | None,
    policy_version: int | None = None,
    fleet: dict[str, Any] | None = None,
) -> list[EpisodeResult]:
    from episodes.envs import check_env_ref

    # Everything that can be wrong with the spec is found before anything starts.
    spec = load_spec(path)
    check_env_ref(spec.env)
    dispatch_spec(spec, policy_version)  # a version needs a model: say so before starting
    tasks = spec.load_tasks()
    total = len(tasks) * spec.samples

    async with contextlib.AsyncExitStack() as stack:
        client, ui_url = await client_for(stack, cfg)
        task_queue = cfg.settings.task_queue
        sink = stack.enter_context(out.open("w")) if out else None
        results: list[EpisodeResult] = []
        episodes = EpisodesClient(client, task_queue=task_queue)
        with progress_bar() as progress:
            bar = progress.add_task(spec.name, total=total, last="")
            async for result in episodes.run_batch(
                spec,
                concurrency=concurrency,
                batch=batch,
                policy_version=policy_version,
                **(fleet or {}),
            ):
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
        if episodes.budget_exhausted:
            console.print(budget_line(episodes.budget_exhausted, len(results), total))
        if out:
            console.print(f"results: {out}")
        if ui_url:
            console.print(f"Temporal UI: {ui_url} (histories kept in .episodes/)")
        return results


def budget_line(budget: str, done: int, total: int) -> str:
    """What `episodes run` says of a batch a budget stopped."""
    return (
        f"[yellow]budget_exhausted[/]: {budget} reached; {done} of {total} episodes ran, "
        "no more were started (run it again with a larger budget to go on)"
    )
