"""`episodes export BATCH --out FILE.parquet`: a batch's training samples, one row each.

The batch's episodes are found as `episodes run --out` finds them (the EpisodeBatch
search attribute, `episodes.client.batch.server.final_episodes`: the final attempt of each
(task, sample), so an attempt a re-run replaced is no member); each one's chain of runs is
read as `episodes show` reads it (`episodes.client.histories.transcript.load_transcript`, through
the same converter), its model calls become samples (`episodes.training.samples`) and
the rows are written by `episodes.training.export`. No worker is needed.

Fails closed, exit 1 and nothing written: a group (a task's samples) with a member
without a result (still running, or its workflow failed: no baseline for the group),
and an episode whose calls lack token data, are named, unless `--skip-incomplete`
(then such a group is left out whole, such an episode alone, and it says how many); a
batch in which no episode made a model call (no `model` in the spec) says so.
Which groups are whole, and the advantages (`--estimator`, `--normalize-std`), are
`episodes.training`'s, as a trainer computes them; `--skip-diverged` leaves out the
episodes whose replay diverged (`replay_divergences`, a column of every row).
Episodes a groups stream cut (`EpisodeResult.cut`: stragglers past a group's
`samples` with `oversample`, or past `group_timeout_s`) belong to no group: left out.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from temporalio.client import WorkflowExecution, WorkflowExecutionStatus

from episodes import search_attributes as sa
from episodes.cli.common import console, err_console, fail, progress_bar
from episodes.cli.embedded import reading_client
from episodes.cli.show import show_converter
from episodes.client.batch.server import final_episodes
from episodes.client.config import Config
from episodes.client.group.history import group_members
from episodes.client.histories.transcript import load_transcript, transcript_of
from episodes.contract import group_id
from episodes.errors import EpisodesError
from episodes.training.estimators import Estimator, diverged
from episodes.training.export import Episode, check_out, export_rows, write_rows
from episodes.training.groups import whole_groups
from episodes.training.samples import no_model_calls, samples_of
from episodes.types.attempts import member_id
from episodes.types.results import EpisodeResult
from episodes.words import plural

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
    estimator: Estimator = "grpo",
    skip_diverged: bool = False,
) -> None:
    check_out(out)
    async with contextlib.AsyncExitStack() as stack:
        client = await reading_client(stack, cfg, data_converter=show_converter())
        # ... and the members of its group workflows (`execution: group`), by member id.
        found = [*await final_episodes(client, batch), *await group_members(client, batch)]
        if not found:
            raise EpisodesError(
                f"batch {batch!r}: no episodes found (none has EpisodeBatch={batch})"
            )
        gate = asyncio.Semaphore(READ_CONCURRENCY)
        with progress_bar() as progress:
            bar = progress.add_task(f"export {batch}", total=len(found), last="")

            async def one(wid: str) -> Episode | None:
                async with gate:
                    data = await load_transcript(client, wid)
                progress.update(bar, advance=1, last=wid)
                if data["result"] is None:
                    return None
                # Samples now, transcripts dropped: a big batch never holds every history.
                result = EpisodeResult.model_validate(data["result"])
                return result, samples_of(transcript_of(data))

            loaded = await asyncio.gather(*(one(wf.id) for wf in found))
        # Cut by a groups stream (stragglers, `oversample`): in no group, never a row.
        kept = [(wf, e) for wf, e in zip(found, loaded, strict=True) if e is None or not e[0].cut]
        cut = len(found) - len(kept)
        done = _whole_or_fail(batch, [wf for wf, _ in kept], [e for _, e in kept], skip_incomplete)
        incomplete = [(r, s) for r, s in done if not s.complete]
        if incomplete and not skip_incomplete:
            named = "; ".join(
                f"{r.workflow_id} (call {s.incomplete[0].call}: {s.incomplete[0].reason})"
                for r, s in incomplete[:NAMED]
            )
            more = f"; and {len(incomplete) - NAMED} more" if len(incomplete) > NAMED else ""
            fail(
                f"batch {batch}: {plural(len(incomplete), 'episode')} lack token data, nothing written: "
                f"{named}{more}. --skip-incomplete exports the others",
                code=1,
            )
        if done and not any(s.made_calls for _, s in done):
            fail(f"{no_model_calls(f'batch {batch}')}; nothing written", code=1)
        rows = export_rows(
            batch,
            done,
            normalize_std=normalize_std,
            estimator=estimator,
            include_diverged=not skip_diverged,
        )
        if not rows:
            fail(f"batch {batch}: no complete episode left to export, nothing written", code=1)
        write_rows(rows, out)
        skipped = f", skipped {plural(len(incomplete), 'incomplete episode')}" if incomplete else ""
        skipped += f", left out {plural(cut, 'cut episode')} (stragglers)" if cut else ""
        gone = sum(1 for r, s in done if s.complete and diverged(r)) if skip_diverged else 0
        skipped += f", left out {plural(gone, 'episode')} whose replay diverged" if gone else ""
        splits = sum(s.splits for _, s in done if s.complete)
        console.print(
            f"{out}: {plural(len(rows), 'sample')} from "
            f"{plural(len(done) - len(incomplete) - gone, 'episode')} "
            f"({plural(splits, 'split')}){skipped}",
            highlight=False,
            soft_wrap=True,
        )


def _whole_or_fail(
    batch: str,
    found: list[WorkflowExecution],
    loaded: list[Episode | None],
    skip_incomplete: bool,
) -> list[Episode]:
    """The episodes of the whole groups (`episodes.training.whole_groups`). Without
    `skip_incomplete` a group missing a result fails the command (naming its members),
    with it the group is left out whole, and said so."""

    def group(member: tuple[WorkflowExecution, Episode | None]) -> str:
        wf = member[0]
        return group_id(batch, wf.typed_search_attributes.get(sa.TASK) or member_id(wf.id))

    picked = whole_groups(
        zip(found, loaded, strict=True), group=group, ended=lambda m: m[1] is not None
    )
    partial = {g: [_why(wf) for wf, _ in members] for g, members in picked.partial.items()}
    if partial:
        named = "; ".join(f"{g}: {', '.join(why)}" for g, why in list(partial.items())[:NAMED])
        more = f"; and {len(partial) - NAMED} more" if len(partial) > NAMED else ""
        if not skip_incomplete:
            fail(
                f"batch {batch}: {len(partial)} group(s) have a member without a result, "
                f"nothing written: {named}{more}. Wait for them, or --skip-incomplete "
                "exports the other groups",
                code=1,
            )
        err_console.print(
            f"skipped {len(partial)} group(s) with a member without a result: {named}{more}",
            highlight=False,
            soft_wrap=True,
        )
    return [e for _, e in picked.members() if e]


def _why(wf: WorkflowExecution) -> str:
    running = wf.status in (None, WorkflowExecutionStatus.RUNNING)
    state = "still running" if running else f"{wf.status.name.lower()}, no result"  # type: ignore[union-attr]
    return f"{wf.id} ({state})"
