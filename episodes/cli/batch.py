"""`episodes run SPEC --on-server`: one EvalBatchWorkflow on the server instead of client fan-out.

The progress bar is fed by the batch's `progress` query, so it survives this process:
run the same command again to re-attach to a running (or finished) batch.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from pathlib import Path
from typing import Any

from rich.table import Table

from episodes.cli.common import console, cost_text, err_console, live_progress, progress_bar
from episodes.cli.embedded import client_for
from episodes.cli.run import (
    KEPT_LINE,
    budget_line,
    config_error_lines,
    every_failed_lines,
    fresh_batch_said,
    reused_note,
)
from episodes.client.batch.dispatch import dispatch_spec
from episodes.client.batch.priority import with_priority
from episodes.client.batch.server import (
    batch_input,
    episode_results,
    start_batch,
    total_episodes,
    wait_batch,
)
from episodes.client.config import Config
from episodes.errors import Interrupted
from episodes.specfile import load_spec
from episodes.types.io import BatchProgress
from episodes.types.metrics import BatchMetrics, report_ks
from episodes.types.results import EpisodeResult
from episodes.words import plural


async def run_spec_batch(
    path: Path,
    *,
    cfg: Config,
    out: Path | None,
    batch: str | None,
    concurrency: int | None,
    pass_threshold: float,
    policy_version: int | None = None,
    priority_options: dict[str, Any] | None = None,
    fresh: bool = False,
) -> int:
    """The batch on the server, its metrics and what went wrong; the exit status (1: a
    configuration error stopped episodes, or every episode failed)."""
    from episodes.envs import check_env_ref

    spec = with_priority(dispatch_spec(load_spec(path), policy_version), **(priority_options or {}))
    check_env_ref(spec.env)
    inp = batch_input(spec, batch_id=batch, concurrency=concurrency, pass_threshold=pass_threshold)
    total = total_episodes(inp)

    async with contextlib.AsyncExitStack() as stack:
        client, ui_url, task_queue = await client_for(stack, cfg)
        if fresh:
            batch = await fresh_batch_said(client, batch or spec.name)
            inp = batch_input(
                spec, batch_id=batch, concurrency=concurrency, pass_threshold=pass_threshold
            )
        else:
            note = await reused_note(client, inp.batch or spec.name, given=batch is not None)
            if note:
                err_console.print(note, highlight=False, soft_wrap=True)
        handle = await start_batch(client, inp, task_queue=task_queue)
        console.print(f"batch workflow [bold]{handle.id}[/]", highlight=False, soft_wrap=True)
        ceiling = inp.concurrency or spec.concurrency
        with (
            progress_bar() as progress,
            live_progress(
                progress,
                client,
                title=inp.batch or spec.name,
                batch=inp.batch or spec.name,
                ceiling=ceiling,
                total=total,
            ) as bar,
        ):

            def show(p: BatchProgress) -> None:
                runs = f" · run {p.runs}" if p.runs > 1 else ""
                parked = f" ({p.parked} parked)" if p.parked else ""
                progress.update(
                    bar, completed=p.done, last=f"{p.running} in flight{parked}{runs} · {p.last}"
                )

            try:
                result = await wait_batch(client, handle, on_progress=show)
            except asyncio.CancelledError:
                raise Interrupted(
                    f"interrupted: batch {handle.id} goes on on the server; the same command "
                    f"re-attaches to it (`temporal workflow cancel -w {handle.id}` stops it)"
                ) from None
            progress.update(bar, completed=result.metrics.count, last="done")
        console.print(
            metrics_table(
                result.metrics,
                title=f"{spec.name}: batch {result.batch}, {plural(result.total, 'episode')}",
                runs=result.runs,
                elapsed_s=result.elapsed_s,
            )
        )
        if result.budget is not None:
            console.print(budget_line(result.budget, result.metrics.count, result.total))
        for error in result.errors:
            console.print(f"[red]failed[/] {error}", highlight=False, soft_wrap=True)
        m = result.metrics
        results: list[EpisodeResult] = []
        # A configuration error ends its episodes harness_start_failed: their results say.
        if out or m.terminations.get("harness_start_failed"):
            results = await episode_results(client, result.batch, expected=result.total)
        lines = config_error_lines(results) or every_failed_lines(Counter(m.terminations), None)
        for line in lines:
            console.print(line, highlight=False, soft_wrap=True)
        if out:
            with out.open("w") as sink:
                for r in results:
                    sink.write(r.model_dump_json() + "\n")
            console.print(f"results: {out} ({plural(len(results), 'episode')})", soft_wrap=True)
        if ui_url:
            console.print(KEPT_LINE, highlight=False, soft_wrap=True)
        return 1 if lines else 0


def metrics_table(
    m: BatchMetrics,
    title: str = "batch",
    *,
    runs: int | None = None,
    elapsed_s: float | None = None,
) -> Table:
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value")
    table.add_row("episodes", str(m.count))
    table.add_row(
        "mean reward",
        f"{m.mean_reward:.3f} (over {m.rewarded})" if m.mean_reward is not None else "-",
    )
    table.add_row("passed", f"{m.passed} (reward ≥ {m.pass_threshold:g})")
    for k in report_ks(m.pass_at_k):
        table.add_row(f"pass@{k}", f"{m.pass_at_k[k]:.3f} (over {m.pass_at_k_tasks[k]} tasks)")
    for kind, n in m.terminations.items():
        table.add_row(f"  {kind}", str(n))
    table.add_row("infrastructure failures", f"{m.infra_failures} (after retries)")
    table.add_row("retried as fresh episodes", str(m.retried))
    if m.model_calls:
        table.add_row("model calls / tokens", f"{m.model_calls} / {m.model_tokens}")
    if m.cost is not None:
        table.add_row("cost", cost_text(m.cost, m.priced, m.count))
    table.add_row("episode time", f"{m.episode_seconds:.1f} s (summed)")
    table.add_row(
        "groups complete / failed", f"{m.groups_complete} / {m.groups_failed} (a task's samples)"
    )
    if m.samples > 1:
        table.add_row("zero-variance groups", f"{m.groups_zero_variance} (all scored the same)")
    d = m.duration_s
    if d.p50 is not None:
        table.add_row("duration p50 / p90 / p99", f"{d.p50:.2f} s / {d.p90:.2f} s / {d.p99:.2f} s")
    if runs is not None:
        table.add_row("workflow runs", f"{runs} (continue-as-new {runs - 1}x)")
    if elapsed_s is not None:
        table.add_row("elapsed", f"{elapsed_s:.1f} s")
    return table
