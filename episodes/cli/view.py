"""`episodes view`: serve the viewer (episodes.viewer) against the configured server."""

from __future__ import annotations

import contextlib

from temporalio.client import Client

from episodes.cli.common import console, err_console, until_signalled
from episodes.cli.embedded import reading_client
from episodes.cli.show import show_converter
from episodes.client.config import Config


async def serve_viewer(cfg: Config, *, host: str, port: int, ui_address: str) -> None:

    # The reader's converter (`episodes show`'s): keys and storage from the environment,
    # and `episodes dev`'s stored payloads when they are here.
    async with contextlib.AsyncExitStack() as stack:
        client = await reading_client(stack, cfg, data_converter=show_converter())
        await _serve(client, host=host, port=port, ui_address=ui_address)


async def _serve(client: Client, *, host: str, port: int, ui_address: str) -> None:
    from episodes.viewer import serve

    if host not in ("127.0.0.1", "localhost", "::1"):
        # The viewer has no login and shows decrypted transcripts to whoever reaches it.
        err_console.print(
            f"[yellow]warning:[/] serving on {host}: anyone who reaches it reads the "
            "transcripts (decrypted, with this process's keys)",
            highlight=False,
        )
    async with serve(client, host=host, port=port, ui_address=ui_address) as viewer:
        console.print(
            f"[green]✓[/] episodes viewer: [bold]{viewer.url}[/] "
            f"(Temporal at {client.service_client.config.target_host}, "
            f"namespace {client.namespace!r}) — Ctrl-C stops it",
            highlight=False,
        )
        await until_signalled()
