"""`episodes export BATCH --out FILE.parquet`: a batch's training samples, one row each.

The batch's episodes are found as `episodes run --out` finds them (the EpisodeBatch
search attribute, `episodes.client.batches.episode_ids`); each one's chain of runs is
read as `episodes show` reads it (`episodes.client.history.load_transcript`, through
the same converter), its model calls become samples (`episodes.training.samples`) and
the rows are written by `episodes.training.export`. No worker is needed.

Fails closed: an episode whose calls lack token data makes the command exit 1 naming
it, and nothing is written, unless `--skip-incomplete` (then it says how many it left
out). Episodes still running, or whose workflow failed, have no reward: left out, and
said so.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from episodes.cli.common import console, err_console, fail, progress_bar
from episodes.cli.show import show_converter
from episodes.client.batches import episode_ids
from episodes.client.config import Config
from episodes.client.connect import connect_config
from episodes.client.history import load_transcript, transcript_of
from episodes.errors import EpisodesError
from episodes.training.export import Episode, check_out, export_rows, write_rows
from episodes.training.samples import samples_of
from episodes.types.results import EpisodeResult

# Histories read at once: each is a few RPCs, and the server serves every worker too.
READ_CONCURRENCY = 16
NAMED = 10  # incomplete episodes named in the error; the rest are counted


async def export_batch(
    batch: str,
    *,
    cfg: Config,
    out: Path,
    normalize_std: bool,
    skip_incomplete: bool,
) -> None:
    check_out(out)
    client = await connect_config(cfg, data_converter=show_converter())
    ids = await episode_ids(client, batch)
    if not ids:
        raise EpisodesError(f"batch {batch!r}: no episodes found (none has EpisodeBatch={batch})")
    episodes: list[Episode | None] = []
    gate = asyncio.Semaphore(READ_CONCURRENCY)
    with progress_bar() as progress:
        bar = progress.add_task(f"export {batch}", total=len(ids), last="")

        async def one(wid: str) -> Episode | None:
            async with gate:
                data = await load_transcript(client, wid)
            progress.update(bar, advance=1, last=wid)
            if data["result"] is None:
                return None
            # Samples now, transcripts dropped: a big batch never holds every history.
            result = EpisodeResult.model_validate(data["result"])
            return result, samples_of(transcript_of(data))

        episodes = await asyncio.gather(*(one(w) for w in ids))
    done = [e for e in episodes if e is not None]
    if len(done) < len(ids):
        err_console.print(
            f"left out {len(ids) - len(done)} episode(s) with no result (still running, "
            "or their workflow failed)",
            highlight=False,
        )
    incomplete = [(r, s) for r, s in done if not s.complete]
    if incomplete and not skip_incomplete:
        named = "; ".join(
            f"{r.workflow_id} (call {s.incomplete[0].call}: {s.incomplete[0].reason})"
            for r, s in incomplete[:NAMED]
        )
        more = f"; and {len(incomplete) - NAMED} more" if len(incomplete) > NAMED else ""
        fail(
            f"batch {batch}: {len(incomplete)} episode(s) lack token data, nothing written: "
            f"{named}{more}. --skip-incomplete exports the others",
            code=1,
        )
    rows = export_rows(batch, done, normalize_std=normalize_std)
    write_rows(rows, out)
    skipped = f", skipped {len(incomplete)} incomplete episode(s)" if incomplete else ""
    splits = sum(s.splits for _, s in done if s.complete)
    console.print(
        f"{out}: {len(rows)} samples from {len(done) - len(incomplete)} episodes "
        f"({splits} split(s)){skipped}",
        highlight=False,
        soft_wrap=True,
    )
