"""`episodes batch status B`: a batch's groups as its trainer left them.

How many groups the trainer acknowledged (`Group.ack()`: kept on the server, so a
restarted trainer never gets them again), how many are outstanding, how many of those
still have an episode running. Read from the batch's receipts
(`episodes.client.group.receipts`) and the visibility store.
"""

from __future__ import annotations

import contextlib
import json
from typing import Annotated

import typer

from episodes.cli import common
from episodes.client.config import Config

app = typer.Typer(
    no_args_is_help=True, help="A batch's groups: acknowledged, outstanding, running."
)


@app.command("status")
@common.with_config(worker=False)
def status(
    batch_id: Annotated[str, typer.Argument(help="The batch id (`run_batch(batch_id=)`).")],
    cfg: Config,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """How many of the batch's groups are acknowledged, outstanding and running."""
    common.run(_status(batch_id, cfg, as_json))


async def _status(batch_id: str, cfg: Config, as_json: bool) -> None:
    from episodes.cli.common import console
    from episodes.cli.embedded import reading_client
    from episodes.client.group.receipts import receipts_status

    async with contextlib.AsyncExitStack() as stack:
        client = await reading_client(stack, cfg)
        s = await receipts_status(client, batch_id)
    if as_json:
        print(json.dumps(s.__dict__))
        return
    if s.groups is None:
        console.print(
            f"batch {batch_id}: no receipts (no group acknowledged or dispatched at a "
            f"version); {s.running} group(s) running",
            highlight=False,
        )
        return
    line = (
        f"batch {batch_id}: {s.acknowledged} of {s.groups} groups acknowledged, "
        f"{s.outstanding} outstanding ({s.running} running)"
    )
    if s.twice:
        line += f"; {s.twice} acknowledged twice"
    console.print(line, highlight=False)
