"""`episodes schedule ...`: Temporal Schedules that run a spec as a batch."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table
from temporalio.client import Client

from episodes.cli import common
from episodes.cli.priority import (
    FairnessKey,
    FairnessWeight,
    MaxCost,
    MaxEpisodeSeconds,
    MaxModelCalls,
    MaxModelTokens,
    Priority,
    priority_kwargs,
)
from episodes.client.config import Config

if TYPE_CHECKING:
    from temporalio.client import Client  # imported when a command runs: a fast --help

app = typer.Typer(
    no_args_is_help=True,
    help="Run a spec as a batch on a cron or an interval (Temporal Schedules).",
)

Name = Annotated[str, typer.Argument(help="The schedule's name (its id).")]
Note = Annotated[str | None, typer.Option(help="A note shown with the schedule.")]
OVERLAP_HELP = (
    "When a run is due while the last one still runs: skip, buffer-one, buffer-all, "
    "cancel-other, terminate-other or allow-all."
)


async def _client(cfg: Config) -> Client:
    from episodes.client.connect import connect_config

    return await connect_config(cfg)


@app.command()
@common.with_config(worker=False)
def create(
    name: Name,
    spec: Annotated[Path, typer.Argument(help="Spec file (YAML or JSON).")],
    cfg: Config,
    cron: Annotated[str | None, typer.Option(help="Cron expression, e.g. '0 3 * * *'.")] = None,
    every: Annotated[str | None, typer.Option(help="Interval, e.g. 6h, 30m, 1h30m.")] = None,
    overlap: Annotated[str, typer.Option(help=OVERLAP_HELP)] = "skip",
    concurrency: Annotated[int | None, typer.Option(help="Episodes in flight per run.")] = None,
    pass_threshold: Annotated[
        float, typer.Option(help="An episode passes when its reward is at least this.")
    ] = 1.0,
    priority: Priority = None,
    fairness_key: FairnessKey = None,
    fairness_weight: FairnessWeight = None,
    max_model_tokens: MaxModelTokens = None,
    max_model_calls: MaxModelCalls = None,
    max_episode_seconds: MaxEpisodeSeconds = None,
    max_cost: MaxCost = None,
) -> None:
    """Create a schedule that runs SPEC as a batch (the dataset is read now)."""
    from episodes.envs import check_env_ref
    from episodes.ops.schedules import create_schedule
    from episodes.specfile import load_spec

    async def main() -> None:
        s = load_spec(spec)
        check_env_ref(s.env)
        client = await _client(cfg)
        await create_schedule(
            client,
            name,
            s,
            task_queue=cfg.settings.task_queue,
            cron=cron,
            every=every,
            overlap=overlap,
            concurrency=concurrency,
            pass_threshold=pass_threshold,
            priority_options=priority_kwargs(
                priority,
                fairness_key,
                fairness_weight,
                max_model_tokens,
                max_model_calls,
                max_episode_seconds,
                max_cost,
            ),
        )
        when = f"cron {cron!r}" if cron else f"every {every}"
        common.console.print(
            f"[green]✓[/] schedule [bold]{name}[/]: spec {s.name}, {when}, overlap {overlap}",
            highlight=False,
        )

    common.run(main())


@app.command("list")
@common.with_config(worker=False)
def list_cmd(cfg: Config) -> None:
    """List the schedules that start batches."""
    from episodes.ops.schedules import list_schedules

    async def main() -> None:
        schedules = await list_schedules(await _client(cfg))
        if not schedules:
            common.console.print("no schedules")
            return
        table = Table(title="schedules", title_justify="left")
        # Names and specs are what people copy into other commands: never cut them.
        table.add_column("name", no_wrap=True, min_width=max(len(s.name) for s in schedules))
        table.add_column("spec", no_wrap=True)
        for col in ("when", "state", "last run", "next run"):
            table.add_column(col)
        for s in schedules:
            table.add_row(
                s.name,
                s.spec_name or "-",
                s.when or "-",
                "paused" if s.paused else "active",
                _time(s.recent[-1].started_at) if s.recent else "-",
                _time(s.next_runs[0]) if s.next_runs else "-",
            )
        common.console.print(table)

    common.run(main())


@app.command()
@common.with_config(worker=False)
def describe(name: Name, cfg: Config) -> None:
    """Show a schedule: its spec, timing, state, recent and next runs."""
    from episodes.ops.schedules import describe_schedule

    async def main() -> None:
        s = await describe_schedule(await _client(cfg), name)
        table = Table(title=f"schedule {s.name}", show_header=False, title_justify="left")
        table.add_column("what", style="bold")
        table.add_column("value")
        table.add_row("spec", s.spec_name or "-")
        table.add_row("episodes per run", str(s.episodes))
        table.add_row("when", s.when or "-")
        table.add_row("overlap", s.overlap or "-")
        table.add_row("task queue", s.task_queue or "-")
        table.add_row(
            "state", ("paused" if s.paused else "active") + (f" ({s.note})" if s.note else "")
        )
        table.add_row("runs started", str(s.actions))
        table.add_row("skipped (overlap)", str(s.skipped_overlap))
        for wid in s.running:
            table.add_row("running", wid)
        for r in s.recent:
            table.add_row("recent", f"{r.workflow_id} (started {_time(r.started_at)})")
        for t in s.next_runs[:3]:
            table.add_row("next", _time(t))
        table.add_row("find its episodes", f"EpisodeSchedule = '{s.name}'")
        common.console.print(table)

    common.run(main())


@app.command()
@common.with_config(worker=False)
def pause(
    name: Name,
    cfg: Config,
    note: Note = None,
) -> None:
    """Pause a schedule (runs already started continue)."""
    from episodes.ops.schedules import pause_schedule

    async def main() -> None:
        await pause_schedule(await _client(cfg), name, note)
        common.console.print(f"[green]✓[/] paused {name}", highlight=False)

    common.run(main())


@app.command()
@common.with_config(worker=False)
def unpause(
    name: Name,
    cfg: Config,
    note: Note = None,
) -> None:
    """Resume a paused schedule."""
    from episodes.ops.schedules import unpause_schedule

    async def main() -> None:
        await unpause_schedule(await _client(cfg), name, note)
        common.console.print(f"[green]✓[/] unpaused {name}", highlight=False)

    common.run(main())


@app.command()
@common.with_config(worker=False)
def trigger(
    name: Name,
    cfg: Config,
    overlap: Annotated[
        str | None, typer.Option(help="Override the overlap policy for this run.")
    ] = None,
) -> None:
    """Start a run now."""
    from episodes.ops.schedules import trigger_schedule

    async def main() -> None:
        await trigger_schedule(await _client(cfg), name, overlap)
        common.console.print(
            f"[green]✓[/] triggered {name}; find it with EpisodeSchedule = '{name}'",
            highlight=False,
        )

    common.run(main())


@app.command()
@common.with_config(worker=False)
def delete(name: Name, cfg: Config) -> None:
    """Delete a schedule (the batches it started stay, findable by EpisodeSchedule)."""
    from episodes.ops.schedules import delete_schedule

    async def main() -> None:
        await delete_schedule(await _client(cfg), name)
        common.console.print(f"[green]✓[/] deleted {name}", highlight=False)

    common.run(main())


def _time(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")
