"""`episodes doctor` and `episodes setup`."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

import typer

from episodes.cli import common
from episodes.client.config import Config


@common.with_config
def doctor(
    cfg: Config,
    runtime: Annotated[
        list[str] | None,
        typer.Option(
            "--runtime",
            help="A runtime the workers must be able to run (a harness.runtime type: "
            "subprocess, docker or a cloud's); repeatable. Others are shown but do not fail.",
        ),
    ] = None,
    no_workers: Annotated[
        bool, typer.Option("--no-workers", help="Do not require a worker polling the queue.")
    ] = False,
) -> None:
    """Check this configuration end to end: one line per check, exit 1 when one fails."""
    from episodes.ops.doctor import run_checks, runtime_names

    known = runtime_names()
    for name in runtime or []:
        if name not in known:
            common.fail(f"--runtime: {name!r} is not one of {', '.join(known)}")
    checks = common.run(run_checks(cfg, runtimes=runtime or [], workers=not no_workers))
    for c in checks:
        style = "green" if c.ok else ("red" if c.required else "dim")
        common.console.print(f"[{style}]{c.line()}[/]", highlight=False, soft_wrap=True)
    failed = [c.name for c in checks if c.failed]
    if failed:
        common.console.print(f"{len(failed)} problem(s): {', '.join(failed)}", highlight=False)
        raise typer.Exit(1)
    common.console.print("everything needed is there", highlight=False)


@common.with_config
def setup(
    cfg: Config,
    retention_days: Annotated[
        int, typer.Option(help="Retention of a namespace this creates (days).")
    ] = 7,
) -> None:
    """Create the namespace if missing and register this project's search attributes."""
    from episodes.ops.doctor import Check, open_client
    from episodes.ops.doctor import setup as do_setup

    async def main() -> list[str]:
        client = await open_client(cfg)
        if isinstance(client, Check):
            common.fail(client.line())
        return await do_setup(client, retention=timedelta(days=retention_days))

    done = common.run(main())
    for line in done or ["nothing to do: namespace and search attributes are in place"]:
        common.console.print(f"[green]✓[/] {line}", highlight=False)
