"""`episodes fork ID --at-turn K --samples N [--out F]`: branches of an episode at a turn
(`episodes park` / `resume`: episodes/cli/park.py)."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from episodes.cli.common import console, progress_bar, summary_table
from episodes.client import EpisodesClient
from episodes.client.config import Config
from episodes.client.connect import connect_config
from episodes.types.results import EpisodeResult


async def fork_command(
    workflow_id: str,
    *,
    cfg: Config,
    at_turn: int,
    samples: int,
    out: Path | None,
    policy_version: int | None = None,
) -> list[EpisodeResult]:
    """Start the branches, wait for them (one progress bar), write their results."""
    client = await connect_config(cfg)
    episodes = EpisodesClient(client, task_queue=cfg.settings.task_queue)
    handles = await episodes.fork(
        workflow_id, at_turn=at_turn, samples=samples, policy_version=policy_version
    )
    results: list[EpisodeResult] = []
    with contextlib.ExitStack() as stack:
        sink = stack.enter_context(out.open("w")) if out else None
        with progress_bar() as progress:
            bar = progress.add_task(
                f"fork {workflow_id} at turn {at_turn}", total=len(handles), last=""
            )
            for done in asyncio.as_completed([h.result() for h in handles]):
                result = await done
                results.append(result)
                if sink:
                    sink.write(result.model_dump_json() + "\n")
                    sink.flush()
                reward = "-" if result.reward is None else f"{result.reward:.2f}"
                progress.update(bar, advance=1, last=f"{result.termination} {reward}")
    results.sort(key=lambda r: r.workflow_id)
    console.print(summary_table(results, title=f"{workflow_id}: {len(results)} branches"))
    return results
