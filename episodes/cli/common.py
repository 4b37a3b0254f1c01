"""What every command shares: one-line errors, running coroutines, the results table."""

from __future__ import annotations

import asyncio
import statistics
from collections import Counter
from collections.abc import Coroutine
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from episodes import contract
from episodes.errors import EpisodesError
from episodes.models import EpisodeResult

console = Console()
err_console = Console(stderr=True)


def fail(message: str, code: int = 2) -> NoReturn:
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a command's coroutine; our own errors become one clear line and exit 2."""
    try:
        return asyncio.run(coro)
    except EpisodesError as e:
        fail(str(e))
    except KeyboardInterrupt:
        fail("interrupted", code=130)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def summary_table(results: list[EpisodeResult], title: str = "episodes") -> Table:
    rewards = [r.reward for r in results if r.reward is not None]
    durations = [r.duration_s for r in results]
    turns = sum(r.turns for r in results)
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value")
    table.add_row("episodes", str(len(results)))
    table.add_row("turns", str(turns))
    table.add_row(
        "mean reward",
        f"{statistics.fmean(rewards):.3f} (over {len(rewards)})" if rewards else "-",
    )
    for kind, n in sorted(Counter(r.termination for r in results).items()):
        table.add_row(f"  {kind}", str(n))
    # Infrastructure vs agent: a lost worker (after its restarts and the batch's retries)
    # is not the agent's outcome; `.r<n>` episodes are the batch's fresh re-runs.
    infra = sum(r.termination in contract.INFRA_TERMINATIONS for r in results)
    table.add_row("infrastructure failures", f"{infra} (after retries)")
    table.add_row("retried as fresh episodes", str(sum(_is_retry(r.workflow_id) for r in results)))
    restarts = sum(r.restarts for r in results)
    if restarts:
        table.add_row("worker-lost restarts", str(restarts))
    pooled = [r.pool_hit for r in results if r.pool_hit is not None]
    if pooled:
        hits = sum(pooled)
        table.add_row("pool hits / misses", f"{hits} / {len(pooled) - hits}")
    if durations:
        table.add_row(
            "duration p50 / p95",
            f"{percentile(durations, 0.5):.2f} s / {percentile(durations, 0.95):.2f} s",
        )
    return table


def _is_retry(workflow_id: str) -> bool:
    last = workflow_id.rsplit(".", 1)[-1]
    return last[:1] == "r" and last[1:].isdigit()


def progress_bar() -> Progress:
    """The bar `episodes run` shows, with the last finished episode beside it."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[last]}"),
        TimeElapsedColumn(),
        console=console,
    )
