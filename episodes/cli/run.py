"""`episodes run SPEC`: every task x sample through Temporal, with progress and a summary."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import re
from collections import Counter
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.markup import escape
from temporalio.client import Client

from episodes import search_attributes as sa
from episodes.cli.common import (
    console,
    err_console,
    live_progress,
    progress_bar,
    summary_table,
)
from episodes.cli.embedded import STATE_DIR, WORKER_LOG, client_for
from episodes.client import EpisodesClient
from episodes.client.batch.dispatch import dispatch_spec
from episodes.client.batch.server import episodes_query
from episodes.client.config import Config
from episodes.client.group.options import groups_spec
from episodes.errors import EpisodesError, Interrupted
from episodes.specfile import load_spec
from episodes.types.results import OK_TERMINATIONS, EpisodeResult
from episodes.words import plural

if TYPE_CHECKING:
    from episodes.client.group.stream import Group


async def run_spec(
    path: Path,
    *,
    cfg: Config,
    out: Path | None,
    batch: str | None,
    concurrency: int | None,
    policy_version: int | None = None,
    priority_options: dict[str, Any] | None = None,
    oversample: int | None = None,
    fresh: bool = False,
) -> list[EpisodeResult]:
    from episodes.envs import check_env_ref

    # Everything that can be wrong with the spec is found before anything starts.
    spec = groups_spec(load_spec(path), True, oversample)
    # Oversampling cuts stragglers, skipping and `group_timeout_s` drop groups: each
    # streams whole groups.
    grouped = bool(spec.oversample or spec.skip_zero_variance or spec.group_timeout_s)
    check_env_ref(spec.env)
    dispatch_spec(spec, policy_version)  # a version needs a model: say so before starting
    tasks = spec.load_tasks()
    total = len(tasks) * spec.samples
    # Streamed as groups, a group may hold more than `samples` (oversampled members
    # that ended together) or be skipped: the bar counts groups, not episodes.
    bar_total = len(tasks) if grouped else total

    async with contextlib.AsyncExitStack() as stack:
        client, ui_url, task_queue = await client_for(stack, cfg)
        sink = stack.enter_context(out.open("w")) if out else None
        results: list[EpisodeResult] = []
        episodes = EpisodesClient(client, task_queue=task_queue)
        if fresh:
            batch = await fresh_batch_said(client, batch or spec.name)
        else:
            note = await reused_note(client, batch or spec.name, given=batch is not None)
            if note:
                err_console.print(note, highlight=False, soft_wrap=True)
        tally: Counter[str] = Counter()
        kw: dict[str, Any] = dict(
            concurrency=concurrency,
            batch_id=batch,
            policy_version=policy_version,
            **(priority_options or {}),
        )
        stream = (
            members(episodes.run_batch(spec, groups=True, **kw), tally)
            if grouped
            else episodes.run_batch(spec, **kw)
        )
        try:
            with (
                progress_bar() as progress,
                live_progress(
                    progress,
                    client,
                    title=f"{batch or spec.name} (groups)" if grouped else batch or spec.name,
                    batch=batch or spec.name,
                    ceiling=concurrency or spec.concurrency,
                    total=bar_total,
                ) as bar,
            ):
                async for result in stream:
                    results.append(result)
                    if sink:
                        sink.write(result.model_dump_json() + "\n")
                        sink.flush()
                    reward = "-" if result.reward is None else f"{result.reward:.2f}"
                    last = f"{result.task_id}#{result.sample} {result.termination} {reward}"
                    if grouped:
                        done = tally["groups"] + episodes.zero_variance_skipped
                        progress.update(bar, completed=done, last=last)
                    else:
                        progress.update(bar, advance=1, last=last)
                # Groups dropped or never started (past a budget) yield nothing: the bar
                # ends full at what came out, and says what did not.
                if grouped:
                    done = tally["groups"] + episodes.zero_variance_skipped
                    tally["dropped"] = episodes.groups_dropped
                    tally["not started"] = bar_total - done - tally["dropped"]
                    note = missing_note(tally)
                else:
                    done = len(results)
                    note = episodes_note(bar_total - done, episodes.budget_exhausted)
                if note:
                    progress.update(bar, completed=done, total=done, last=note)
        except asyncio.CancelledError:
            # The user's Ctrl-C: the stream cancelled the episodes still running (they
            # end `cancelled`, boxes released). One line, not a traceback.
            await _settle(client, batch or spec.name)
            raise Interrupted(
                f"interrupted: {plural(total - len(results), 'episode')} cancelled, {len(results)} of "
                f"{total} finished; the same command runs the cancelled ones again"
            ) from None
        title = (
            f"{batch or spec.name}: {plural(len(results), 'episode')} in "
            f"{plural(tally['groups'], 'group')}"
            if grouped
            else f"{batch or spec.name}: {plural(total, 'episode')}"
        )
        console.print(summary_table(results, title=title))
        if episodes.budget_exhausted:
            # Every episode that ran, a skipped or dropped group's too (not only those
            # that came out), of what the spec asked for.
            ran = episodes.episodes_ran
            console.print(budget_line(episodes.budget_exhausted, ran, total))
        if grouped:
            line = groups_line(tally, episodes.zero_variance_skipped, episodes.budget_exhausted)
            console.print(line, highlight=False)
        for line in failure_lines(results) or some_failed_lines(results):
            console.print(line, highlight=False, soft_wrap=True)
        if out:
            console.print(f"results: {out}")
        if ui_url:
            console.print(KEPT_LINE, highlight=False, soft_wrap=True)
            if any(r.termination not in OK_TERMINATIONS for r in results):
                console.print(f"worker log: {STATE_DIR / WORKER_LOG}", highlight=False)
        return results


async def members(
    groups: AsyncGenerator[Group, None], tally: Counter[str]
) -> AsyncGenerator[EpisodeResult, None]:
    """The results of each group as it comes, its groups and cut members counted."""
    try:
        async for g in groups:
            tally["groups"] += 1
            tally["cut"] += len(g.cut)
            tally["partial"] += g.partial
            for r in g.results:
                yield r
    finally:
        await groups.aclose()  # cancels the episodes still running


def groups_line(tally: Counter[str], skipped: int, budget: str | None = None) -> str:
    """What `episodes run` says of the groups it streamed (and of those it did not)."""
    line = f"groups: {tally['groups']}"
    if tally["partial"]:
        line += f" ({tally['partial']} partial, cut at group_timeout_s)"
    if skipped:
        line += f", {skipped} zero-variance skipped (all scored the same)"
    if tally["dropped"]:
        line += f"; {tally['dropped']} dropped at group_timeout_s (group_on_timeout: drop)"
    if tally["not started"]:
        why = " (budget reached)" if budget else ""
        line += f"; {tally['not started']} not started{why}"
    if tally["cut"]:
        line += f"; {plural(tally['cut'], 'straggler episode')} cut (cancelled, never exported)"
    return line


def missing_note(tally: Counter[str]) -> str:
    """Beside the groups bar when it ends: the groups that did not come out, or ''."""
    dropped, waiting = tally["dropped"], tally["not started"]
    n = dropped + waiting
    if n <= 0:
        return ""
    groups = f"{n} group{'s' if n > 1 else ''}"
    if dropped and waiting:
        return f"{groups}: {dropped} dropped / {waiting} not started"
    return f"{groups} {'dropped' if dropped else 'not started'}"


def episodes_note(missing: int, budget: str | None) -> str:
    """Beside the episodes bar when it ends short: why, or ''."""
    if missing <= 0:
        return ""
    why = "not started (budget reached)" if budget else "cut or dropped with their group"
    return f"{missing} episode{'s' if missing > 1 else ''} {why}"


# After an embedded run its server is gone (its UI address with it): what reads the
# histories it kept.
KEPT_LINE = (
    "histories kept in .episodes/: `episodes show ID`, `episodes view` and `episodes "
    "export` read them here; `episodes dev` serves them in the Temporal UI"
)


async def fresh_batch(client: Client, batch_id: str) -> str:
    """`--fresh`: a batch id no episode has yet, derived from `batch_id` (`name-2`,
    `name-3`, ...; from `name-2` itself, `name-3` when `name` ran too): the spec runs
    afresh, nothing of an earlier run is reused. `batch_id` itself when nothing ran
    under it."""
    if not await _count(client, episodes_query(batch_id)):
        return batch_id
    root = re.sub(r"-\d+$", "", batch_id)
    # A `-N` is a fresh run's suffix only when its root ran too: `run-2024`, or a name
    # ending in a number of its own, stays whole (it became `run-2` before).
    if root == batch_id or not await _count(client, episodes_query(root)):
        root = batch_id
    for n in itertools.count(2):
        candidate = f"{root}-{n}"
        if not await _count(client, episodes_query(candidate)):
            return candidate
    raise AssertionError("unreachable")


async def fresh_batch_said(client: Client, batch_id: str) -> str:
    """`fresh_batch`, said on stderr when it is a new id."""
    fresh = await fresh_batch(client, batch_id)
    if fresh != batch_id:
        err_console.print(
            f"note: --fresh: batch {batch_id!r} has episodes; this run is batch {fresh!r}",
            highlight=False,
            soft_wrap=True,
        )
    return fresh


async def _count(client: Client, query: str) -> int:
    return (await client.count_workflows(query)).count


async def reused_note(client: Client, batch_id: str, *, given: bool) -> str:
    """Before a run: one line when the batch id already has finished episodes, which are
    attached to, not run again (a spec edited since would otherwise look ignored)."""
    try:
        done = f"{episodes_query(batch_id)} AND ExecutionStatus = 'Completed'"
        n = await _count(client, done)
        cancelled = await _count(client, f"{done} AND {sa.TERMINATION.name} = 'cancelled'")
        cancelled += await _count(
            client, f"{episodes_query(batch_id)} AND ExecutionStatus = 'Canceled'"
        )
    except Exception:  # an id visibility cannot hold, a server without our attributes
        return ""
    reused = n - min(cancelled, n)
    if not reused and not cancelled:
        return ""
    where = f"batch {batch_id!r}" + ("" if given else " (the spec's name)")
    said = []
    if reused:
        said.append(
            f"has {reused} finished episode{'s' if reused > 1 else ''} from an earlier run: "
            f"{'they are' if reused > 1 else 'it is'} reused, not run again"
        )
    if cancelled:
        said.append(
            f"{'has ' if not reused else ''}{cancelled} cancelled "
            f"episode{'s' if cancelled > 1 else ''} that run{'' if cancelled > 1 else 's'} again"
        )
    return f"note: {where} {'; '.join(said)}; --fresh (or --batch-id NEW) runs the spec afresh"


async def _settle(client: Client, batch_id: str, timeout_s: float = 15.0) -> None:
    """Wait (a little) for the cancelled episodes to end, so that a worker this command
    hosts is not stopped under them: they close `cancelled`, and the next run of the
    batch runs them again. A second Ctrl-C leaves at once."""
    try:
        query = f"{episodes_query(batch_id)} AND ExecutionStatus = 'Running'"
    except EpisodesError:  # an id the visibility query cannot hold
        return
    deadline = asyncio.get_running_loop().time() + timeout_s
    with console.status("cancelling the running episodes"):
        while asyncio.get_running_loop().time() < deadline:
            try:
                if (await client.count_workflows(query)).count == 0:
                    return
            except Exception:  # the server is gone: nothing to wait for
                return
            await asyncio.sleep(0.2)


def failure_lines(results: list[EpisodeResult]) -> list[str]:
    """What goes under the summary when the run went wrong: each configuration error
    once (it says what to fix), or that every episode failed. Empty: the run is fine."""
    lines = config_error_lines(results)
    if not lines:
        failed = [r for r in results if r.termination not in OK_TERMINATIONS]
        lines = every_failed_lines(
            Counter(r.termination for r in results), failed[0] if failed else None
        )
    return lines


def some_failed_lines(results: list[EpisodeResult]) -> list[str]:
    """When some episodes (not all, no configuration error) ended badly: how many, how,
    and the first one's error, so a failure among successes is not a silent row. A
    cancelled episode is no failure (Ctrl-C says so on its own)."""
    if failure_lines(results):
        return []
    failed = [r for r in results if r.termination not in (*OK_TERMINATIONS, "cancelled")]
    if not failed:
        return []
    kinds = ", ".join(f"{k} {n}" for k, n in Counter(r.termination for r in failed).items())
    lines = [
        f"[bold yellow]{len(failed)} of {len(results)} episodes failed[/] ({kinds}): "
        f"`episodes show {failed[0].workflow_id}` shows one"
    ]
    if failed[0].error:
        lines.append(f"  first error: {_first_line(failed[0].error)}")
    return lines


def config_error_lines(results: list[EpisodeResult]) -> list[str]:
    """Each configuration error once, with how many episodes it stopped."""
    config = Counter(_first_line(r.error) for r in results if r.config_error)
    return [
        f"[bold red]configuration error[/] ({n} episode{'s' if n > 1 else ''}, not run "
        f"again): {error}"
        for error, n in config.items()
    ]


def every_failed_lines(terminations: Counter[str], example: EpisodeResult | None) -> list[str]:
    """One line (and the first error) when no episode ended well; else none."""
    if not terminations or any(k in OK_TERMINATIONS for k in terminations):
        return []
    kinds = ", ".join(f"{k} {n}" for k, n in terminations.items())
    lines = [f"[bold red]every episode failed[/] ({kinds})"]
    if example is not None:
        lines[0] += f": `episodes show {example.workflow_id}` shows one"
        if example.error:
            lines.append(f"  first error: {_first_line(example.error)}")
    return lines


def exit_code(results: list[EpisodeResult]) -> int:
    """1 when a configuration error stopped episodes or every episode failed, else 0."""
    return 1 if failure_lines(results) else 0


def _first_line(error: str | None) -> str:
    """The error's first line, as text (rich must not read `[...]` in it as markup)."""
    text = (error or "").strip()
    return escape(text.splitlines()[0]) if text else "(no message)"


def budget_line(budget: str, done: int, total: int) -> str:
    """What `episodes run` says of a batch a budget stopped."""
    return (
        f"[yellow]budget_exhausted[/]: {budget} reached; {done} of {total} episodes ran, "
        "no more were started (run it again with a larger budget to go on)"
    )
