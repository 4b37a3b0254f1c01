"""`episodes park ID | --batch B` and `episodes resume ID | --batch B`: release an
episode's (or an interactive session's) box at its next turn boundary and wait,
durably; then replay and go on."""

from __future__ import annotations

from typing import Annotated

import typer

from episodes.cli import common
from episodes.client.config import Config
from episodes.words import plural

_ID = Annotated[
    str | None,
    typer.Argument(
        help="The episode's (or interactive session's) workflow id.", show_default=False
    ),
]


def _batch_help(what: str) -> str:
    return f"{what} every running episode of this batch id instead of one episode."


@common.with_config(worker=False)
def park(
    cfg: Config,
    workflow_id: _ID = None,
    batch: Annotated[str | None, typer.Option("--batch", help=_batch_help("Park"))] = None,
) -> None:
    """Park an episode: at its next turn boundary it releases box and harness and waits."""
    common.run(signal_command("park", workflow_id, batch, cfg=cfg))


@common.with_config(worker=False)
def resume(
    cfg: Config,
    workflow_id: _ID = None,
    batch: Annotated[str | None, typer.Option("--batch", help=_batch_help("Resume"))] = None,
) -> None:
    """Resume a parked episode: a new session replays its turns exactly, then goes on."""
    common.run(signal_command("resume", workflow_id, batch, cfg=cfg))


async def signal_command(
    what: str, workflow_id: str | None, batch: str | None, *, cfg: Config
) -> None:
    """`park` or `resume` one episode, or every running episode of a batch (a signal
    each: it acts at the episode's next turn boundary)."""
    from temporalio.service import RPCError

    from episodes.client import EpisodesClient
    from episodes.client.connect import connect_config
    from episodes.errors import EpisodesError

    if (workflow_id is None) == (batch is None):
        raise EpisodesError(f"{what}: give an episode's workflow id or --batch BATCH_ID (one)")
    episodes = EpisodesClient(await connect_config(cfg), task_queue=cfg.settings.task_queue)
    if batch is not None:
        if what == "park":
            report = await episodes.park_batch(batch)
            common.console.print(report.line(batch), highlight=False)
            return
        ids = await episodes.resume_batch(batch)
        common.console.print(
            f"{what} asked of {plural(len(ids), 'running episode')} of batch {batch}"
        )
        return
    assert workflow_id is not None
    try:
        await (episodes.park if what == "park" else episodes.resume)(workflow_id)
    except RPCError as e:
        raise EpisodesError(f"{what} {workflow_id}: {e.message}") from None
    common.console.print(f"{what} asked of {workflow_id}")
