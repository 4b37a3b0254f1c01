"""`episodes dev`: the embedded Temporal dev server, a worker and the episodes viewer in
one process (episodes/cli/embedded.py starts them)."""

from __future__ import annotations

from typing import Annotated

import typer

from episodes.cli import common
from episodes.types.tuning import DEFAULT_TASK_QUEUE

DEV_PORT = 7233
TaskQueue = Annotated[str, typer.Option(help="The shared task queue workers poll.")]


def dev(
    port: Annotated[
        int | None,
        typer.Option(
            help="gRPC port of the dev server (default: 7233, or free ports when a server "
            "that is not this checkout's has it; a given port that is taken is an error)."
        ),
    ] = None,
    ui_port: Annotated[int | None, typer.Option(help="UI port (default: port + 1000).")] = None,
    task_queue: TaskQueue = DEFAULT_TASK_QUEUE,
    max_sessions: Annotated[int, typer.Option(help="Live sessions this worker holds.")] = 256,
    viewer_port: Annotated[
        int, typer.Option(help="Port of the episodes viewer (`episodes view`; 0: any free).")
    ] = 8234,
    reload: Annotated[
        bool,
        typer.Option(
            "--reload",
            help="Import an env module again when its file changes, for the episodes that "
            "start after (running ones keep their code). Without it: a warning.",
        ),
    ] = False,
    require_sandbox: Annotated[
        bool,
        typer.Option(
            help="Refuse to start when this machine cannot make sandboxes (the default "
            "runtime); --no-require-sandbox starts anyway.",
        ),
    ] = True,
) -> None:
    """Start the embedded Temporal dev server (SQLite under .episodes/, UI), a worker and
    the episodes viewer."""
    from episodes.cli.embedded import embedded_stack, viewer_beside
    from episodes.envs.stale import set_reload

    set_reload(reload)

    async def main() -> None:
        async with embedded_stack(
            port=port,
            prefer_port=DEV_PORT,
            ui_port=ui_port,
            task_queue=task_queue,
            max_sessions=max_sessions,
            require_sandbox=require_sandbox,
            shared=True,
        ) as stack:
            s = stack.server
            if stack.moved_from is not None:
                common.err_console.print(
                    f"[yellow]127.0.0.1:{stack.moved_from} is taken by a server this checkout "
                    f"did not start: this one is on {s.address} (`--port` chooses)",
                    highlight=False,
                )
            how = "reusing this checkout's dev server on" if s.reused else "dev server on"
            common.console.print(f"[green]✓[/] {how} [bold]{s.address}[/]")
            if s.ui_url and not s.reused:
                common.console.print(f"[green]✓[/] Temporal UI: [bold]{s.ui_url}[/]")
            async with viewer_beside(stack, viewer_port) as viewer:
                common.console.print(f"[green]✓[/] episodes viewer: [bold]{viewer.url}[/]")
                common.console.print(
                    f"[green]✓[/] worker [bold]{stack.worker.worker_id}[/] on queue "
                    f"{task_queue!r} — Ctrl-C stops it"
                )
                await common.until_signalled()

    common.run(main())
