"""`episodes fork ID --at-turn K --samples N [--out F]`: branches of an episode at a turn
(`episodes park` / `resume`: episodes/cli/park.py)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

from temporalio.client import Client

from episodes.cli.common import console, progress_bar, summary_table
from episodes.cli.embedded import client_for, own_histories
from episodes.client.config import Config
from episodes.client.connect import connect_config
from episodes.client.histories.fork import branch_ended, start_branches
from episodes.types.results import WORKFLOW_FAILED, EpisodeResult
from episodes.words import plural


async def fork_command(
    workflow_id: str,
    *,
    cfg: Config,
    at_turn: int,
    samples: int,
    out: Path | None,
    policy_version: int | None = None,
) -> list[EpisodeResult]:
    """Start the branches, wait for them (one progress bar), write their results (a
    branch whose workflow failed: a `workflow_failed` result, `failed_line` says it)."""
    async with contextlib.AsyncExitStack() as stack:
        if own_histories(cfg):
            # The histories an embedded run kept, and no server serves them: this
            # checkout's server on them and a worker here for the branches, as
            # `episodes run` does.
            client, _, task_queue = await client_for(stack, cfg)
        else:
            client, task_queue = await connect_config(cfg), cfg.settings.task_queue
        return await _fork(client, task_queue, workflow_id, at_turn, samples, out, policy_version)


async def _fork(
    client: Client,
    task_queue: str,
    workflow_id: str,
    at_turn: int,
    samples: int,
    out: Path | None,
    policy_version: int | None,
) -> list[EpisodeResult]:
    began = time.monotonic()
    parent, handles = await start_branches(
        client,
        task_queue,
        workflow_id,
        at_turn=at_turn,
        samples=samples,
        policy_version=policy_version,
    )
    results: list[EpisodeResult] = []
    with contextlib.ExitStack() as stack:
        sink = stack.enter_context(out.open("w")) if out else None
        with progress_bar() as progress:
            bar = progress.add_task(
                f"fork {workflow_id} at turn {at_turn}", total=len(handles), last=""
            )
            ended = [branch_ended(h, parent, began) for h in handles]
            for done in asyncio.as_completed(ended):
                result, _ = await done
                results.append(result)
                if sink:
                    sink.write(result.model_dump_json() + "\n")
                    sink.flush()
                reward = "-" if result.reward is None else f"{result.reward:.2f}"
                progress.update(bar, advance=1, last=f"{result.termination} {reward}")
    results.sort(key=lambda r: r.workflow_id)
    console.print(summary_table(results, title=f"{workflow_id}: {plural(len(results), 'branch')}"))
    return results


def failed_line(results: list[EpisodeResult]) -> str | None:
    """The one line `episodes fork` ends with when a branch's workflow failed, else None."""
    failed = [r for r in results if r.termination == WORKFLOW_FAILED]
    if not failed:
        return None
    first = failed[0]
    why = ((first.error or "").strip().splitlines() or ["no detail"])[0]
    more = f" (and {len(failed) - 1} more branch(es))" if len(failed) > 1 else ""
    return (
        f"branch {first.workflow_id} failed{more}: {why}; `episodes show "
        f"{first.workflow_id}` shows what it did, the same command runs the failed "
        "branches again"
    )
