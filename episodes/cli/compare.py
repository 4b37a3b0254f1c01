"""`episodes compare BATCH_A BATCH_B`: is B different from A beyond the noise?

Both batches are read from their histories (`episodes.client.histories.outcomes`, no
worker needed), paired by task and tested (`episodes.evals.comparison`: a paired
sign-flip permutation test over tasks; docs/comparing.md says the method and its
assumptions). It prints each batch's figures with their intervals side by side, the
difference B minus A in mean reward with its interval and p-value, the verdict, the
tasks that flipped, and a warning for each pin the two manifests disagree on
(`episodes.evals.manifest`). `--json`: the same as one object (`difference`,
`interval`, `p_value`, `significant`, `flipped`, ...).
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from rich.progress import TaskID
from rich.table import Table
from temporalio.client import Client

from episodes.cli.common import console, err_console, progress_bar
from episodes.cli.embedded import reading_client
from episodes.cli.show import show_converter
from episodes.client.config import Config
from episodes.client.histories.outcomes import BatchOutcomes, read_outcomes
from episodes.evals.comparison import Comparison, compare
from episodes.evals.manifest import differences, unpinned
from episodes.evals.summary import Estimate
from episodes.words import plural

FLIPS_SHOWN = 50  # tasks listed by name; the rest counted


async def compare_batches(
    a: str,
    b: str,
    *,
    cfg: Config,
    threshold: float,
    alpha: float,
    seed: int,
    as_json: bool,
) -> None:
    async with contextlib.AsyncExitStack() as stack:
        client = await reading_client(stack, cfg, data_converter=show_converter())
        if as_json:  # stdout holds the JSON alone
            read = [await read_outcomes(client, name) for name in (a, b)]
        else:
            read = await _read_shown(client, (a, b))
    ra, rb = read
    result = compare(ra.outcomes, rb.outcomes, threshold, alpha=alpha, seed=seed)
    warnings = differences(ra.manifest, rb.manifest)
    notes = unpinned(ra.manifest, rb.manifest)
    if as_json:
        print(
            json.dumps(
                {
                    "batches": {"a": a, "b": b},
                    **result.as_dict(),
                    "manifests": {"a": ra.manifest, "b": rb.manifest},
                    "warnings": warnings,
                    "notes": notes,
                },
                indent=2,
                ensure_ascii=False,
            )
        )
        return
    for line in warnings:
        err_console.print(f"[yellow]warning:[/] {line}", highlight=False, soft_wrap=True)
    console.print(figures_table(a, b, result))
    for line in verdict_lines(result):
        console.print(line, highlight=False, soft_wrap=True)
    for line in notes:
        console.print(f"[dim]note: {line}[/]", highlight=False, soft_wrap=True)


async def _read_shown(client: Client, names: tuple[str, str]) -> list[BatchOutcomes]:
    """Both batches' outcomes, a progress bar each while their histories are read."""
    read = []
    with progress_bar() as progress:
        for name in names:
            bar = progress.add_task(f"read {name}", total=None, last="")

            def found(n: int, bar: TaskID = bar) -> None:
                progress.update(bar, total=n)

            def advance(wid: str, bar: TaskID = bar) -> None:
                progress.update(bar, advance=1, last=wid)

            read.append(await read_outcomes(client, name, on_found=found, on_read=advance))
            progress.update(bar, last="done")
    return read


def _est(e: Estimate | None, digits: int = 3) -> str:
    if e is None:
        return "-"
    text = f"{e.value:.{digits}f}"
    if e.interval is not None:
        text += f" [{e.interval.low:.{digits}f}, {e.interval.high:.{digits}f}]"
    return text


def figures_table(a: str, b: str, c: Comparison) -> Table:
    """Each batch's figures with their intervals, side by side."""
    level = f"{c.a.level:.0%}"
    table = Table(title=f"{a} (A) vs {b} (B), {level} intervals", title_justify="left")
    table.add_column("")
    table.add_column("A", justify="right")
    table.add_column("B", justify="right")

    def row(label: str, get: Any) -> None:
        table.add_row(label, get(c.a), get(c.b))

    row("tasks", lambda s: str(s.tasks))
    row(
        "episodes",
        lambda s: str(s.episodes) + (f" ({s.left_out} left out)" if s.left_out else ""),
    )
    row("mean reward", lambda s: _est(s.mean_reward))
    row(
        "  standard error",
        lambda s: (
            f"{s.mean_reward.standard_error:.3f}"
            if s.mean_reward and s.mean_reward.standard_error is not None
            else "-"
        ),
    )
    row(f"pass rate (reward ≥ {c.a.threshold:g})", lambda s: _est(s.pass_rate))
    ks = sorted(set(c.a.pass_at_k) | set(c.b.pass_at_k))
    for k in ks:
        row(f"pass@{k}", lambda s, k=k: _est(s.pass_at_k.get(k)))
    for k in ks:
        if k > 1:
            row(f"pass^{k}", lambda s, k=k: _est(s.pass_hat_k.get(k)))
    return table


def verdict_lines(c: Comparison) -> list[str]:
    """The difference, its interval and p-value, the verdict, the flipped tasks."""
    iv = c.interval
    shown = f", {iv.level:.0%} interval [{iv.low:+.3f}, {iv.high:+.3f}]" if iv else ""
    lines = [
        f"difference (B - A): [bold]{c.difference:+.3f}[/] mean reward{shown}, "
        f"p = {c.p_value:.4g} (paired sign-flip test over {plural(c.paired, 'task')})",
        (
            f"[bold green]beyond the noise[/] (p < {c.alpha:g})"
            if c.significant
            else f"[bold]within the noise[/] (p ≥ {c.alpha:g}): no difference shown"
        ),
    ]
    if c.only_a or c.only_b:
        lines.append(
            f"[yellow]unpaired:[/] {plural(len(c.only_a), 'task')} only in A, "
            f"{len(c.only_b)} only in B (left out of the difference)"
        )
    gained = sum(1 for f in c.flipped if f.b)
    lines.append(
        f"flipped: {len(c.flipped)} of {plural(c.paired, 'task')} ({c.flip_rate:.0%}): "
        f"{gained} fail → pass, {len(c.flipped) - gained} pass → fail"
    )
    for f in c.flipped[:FLIPS_SHOWN]:
        lines.append(f"  {f.task}: {'pass' if f.a else 'fail'} → {'pass' if f.b else 'fail'}")
    if len(c.flipped) > FLIPS_SHOWN:
        lines.append(f"  … and {len(c.flipped) - FLIPS_SHOWN} more (--json lists them all)")
    return lines
