"""What every command shares: one-line errors, running coroutines, the results table."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import inspect
import os
import signal
import statistics
import threading
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, get_args

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from episodes.client.config import flag
from episodes.errors import EpisodesError
from episodes.types.attempts import final_attempts
from episodes.types.cost import Cost, ModelUsage, merge_usage
from episodes.types.results import INFRA_TERMINATIONS, EpisodeResult
from episodes.words import plural, usd

if TYPE_CHECKING:
    from temporalio.client import Client

    from episodes.client.batch.live import LiveFigure
    from episodes.client.config import Config

console = Console()
err_console = Console(stderr=True)


def fail(message: str, code: int = 2) -> NoReturn:
    # Escaped: a message is text, not markup ("[episodes]" in a config error is kept).
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a command's coroutine; our own errors become one clear line and exit 2."""
    try:
        return asyncio.run(coro)
    except EpisodesError as e:
        fail(str(e), code=getattr(e, "exit_code", 2))
    except KeyboardInterrupt:
        fail("interrupted", code=130)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def summary_table(results: list[EpisodeResult], title: str = "episodes") -> Table:
    # One row of figures per (task, sample): its final attempt, as every batch figure.
    results = final_attempts(results, workflow_id=lambda r: r.workflow_id)
    rewards = [r.reward for r in results if r.reward is not None]
    durations = [r.duration_s for r in results]
    turns = sum(r.turns for r in results)
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value")
    table.add_row("episodes", str(len(results)))
    table.add_row("turns", str(turns))
    table.add_row(
        "mean reward",
        f"{statistics.fmean(rewards):.3f} (over {len(rewards)})" if rewards else "-",
    )
    for kind, n in sorted(Counter(r.termination for r in results).items()):
        table.add_row(f"  {kind}", str(n))
    # Infrastructure vs agent: a lost worker (after its restarts and the batch's retries)
    # is not the agent's outcome; `retries`: the batch's fresh re-runs after those (a
    # re-run of an episode a Ctrl-C cancelled is not one, though its id is `.r<n>` too).
    infra = sum(r.termination in INFRA_TERMINATIONS for r in results)
    table.add_row("infrastructure failures", f"{infra} (after retries)")
    table.add_row("retried as fresh episodes", str(sum(r.retries for r in results)))
    restarts = sum(r.restarts for r in results)
    if restarts:
        table.add_row("worker-lost restarts", str(restarts))
    # Groups (a task's samples) whose members all scored the same: no GRPO signal.
    groups: dict[str, list[float | None]] = {}
    for r in results:
        groups.setdefault(r.task_id, []).append(r.reward)
    multi = [g for g in groups.values() if len(g) > 1]
    if multi:
        same = sum(None not in g and len(set(g)) == 1 for g in multi)
        table.add_row("zero-variance groups", f"{same} of {len(multi)} (all scored the same)")
    pooled = [r.pool_hit for r in results if r.pool_hit is not None]
    if pooled:
        hits = sum(pooled)
        table.add_row("pool hits / misses", f"{hits} / {len(pooled) - hits}")
    if durations:
        table.add_row(
            "duration p50 / p95",
            f"{percentile(durations, 0.5):.2f} s / {percentile(durations, 0.95):.2f} s",
        )
    for what, value in usage_rows(merge_usage(*(r.usage for r in results))):
        table.add_row(what, value)
    costs = [r.cost for r in results if r.cost is not None]
    if costs:
        table.add_row(
            "cost", cost_text(functools.reduce(Cost.plus, costs), len(costs), len(results))
        )
    return table


def usage_rows(usage: dict[str, ModelUsage]) -> list[tuple[str, str]]:
    """A row per model: its calls and tokens as the upstream reported them."""
    rows = []
    for name, u in usage.items():
        cached = f" ({u.cached_tokens} cached)" if u.cached_tokens else ""
        reasoning = f" ({u.reasoning_tokens} reasoning)" if u.reasoning_tokens else ""
        rows.append(
            (
                f"model {name}",
                f"{plural(u.calls, 'call')}: {u.input_tokens} in{cached}, "
                f"{u.output_tokens} out{reasoning}",
            )
        )
    return rows


def cost_text(cost: Cost, priced: int, episodes: int) -> str:
    """`$0.0123 (models $0.01, boxes $0.0023)`, and what it leaves out."""
    text = f"{usd(cost.total)} (models {usd(cost.model)}, boxes {usd(cost.box)})"
    if priced < episodes:
        text += f", {priced} of {plural(episodes, 'episode')} priced"
    if cost.unpriced:
        text += f"; no price for {', '.join(cost.unpriced)}"
    return text


class _PlainProgress(Progress):
    """Off a terminal (nohup, a CI log) a live bar draws nothing until it ends: a plain
    line per unfinished bar every `every_s` seconds instead, so a long run shows it
    is alive (`3/16 · a#1 env_done 1.000 · 0:01:05`)."""

    def __init__(self, *columns: Any, every_s: float, **options: Any) -> None:
        super().__init__(*columns, **options)
        self.every_s = every_s
        self._done = threading.Event()
        self._ticker: threading.Thread | None = None

    def start(self) -> None:
        super().start()
        self._ticker = threading.Thread(target=self._tick, name="progress-lines", daemon=True)
        self._ticker.start()

    def stop(self) -> None:
        self._done.set()
        if self._ticker is not None:
            self._ticker.join()
        super().stop()

    def _tick(self) -> None:
        while not self._done.wait(self.every_s):
            for task in self.tasks:
                if not task.finished:
                    self.console.print(plain_progress_line(task), highlight=False, soft_wrap=True)


def plain_progress_line(task: Task) -> str:
    """One bar as a line of text: `title: 3/16 · last · 0:01:05`."""
    done = f"{int(task.completed)}/{int(task.total)}" if task.total else str(int(task.completed))
    parts = [f"{task.description}: {done}"]
    last = str(task.fields.get("last") or "")
    if last:
        parts.append(last)
    elapsed = int(task.elapsed or 0)
    parts.append(f"{elapsed // 3600}:{elapsed // 60 % 60:02d}:{elapsed % 60:02d}")
    return " · ".join(parts)


PROGRESS_EVERY_S = 5.0
"""Off a terminal, a progress line this often (EPISODES_PROGRESS_EVERY_S)."""


def progress_bar() -> Progress:
    """The bar `episodes run` shows, with the last finished episode beside it; off a
    terminal, a plain progress line every few seconds instead."""
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[last]}"),
        TimeElapsedColumn(),
    )
    if console.is_terminal:
        return Progress(*columns, console=console)
    every = float(os.environ.get("EPISODES_PROGRESS_EVERY_S") or PROGRESS_EVERY_S)
    return _PlainProgress(*columns, console=console, every_s=every)


@contextlib.contextmanager
def live_progress(
    progress: Progress, client: Client, *, title: str, batch: str, ceiling: int, total: int
) -> Iterator[TaskID]:
    """A bar for the batch, its name followed by how many of its episodes are live out
    of the `concurrency` ceiling and how many wait for a box
    (`episodes.client.batch.live`), refreshed every 2 s while the bar shows."""
    from episodes.client.batch.live import watch_live

    bar = progress.add_task(title, total=total, last="")

    def show(figure: LiveFigure) -> None:
        progress.update(bar, description=f"{title} · {figure.line(ceiling)}")

    watcher = asyncio.ensure_future(watch_live(client, batch, show))
    try:
        yield bar
    finally:
        watcher.cancel()


# -- the shared option set ---------------------------------------------------------
# Every command that talks to Temporal takes these (`@with_config`), resolved once by
# `episodes.client.config.load_config`: flags > environment > config file > defaults.

_CONN = "Temporal connection (else TEMPORAL_* variables, then the config file's profile)"
_SET = "Settings (else EPISODES_* variables, then the config file's \\[episodes] table)"

CONFIG_OPTIONS: dict[str, Any] = {
    "config": Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="TOML file: \\[profile.NAME] (Temporal's envconfig) and \\[episodes]. "
            "Else EPISODES_CONFIG_FILE, TEMPORAL_CONFIG_FILE, ./episodes.toml.",
            rich_help_panel=_CONN,
        ),
    ],
    "profile": Annotated[
        str | None,
        typer.Option(
            help="Profile in the config file (else TEMPORAL_PROFILE, default).",
            rich_help_panel=_CONN,
        ),
    ],
    "address": Annotated[
        str | None, typer.Option(help="Temporal frontend host:port.", rich_help_panel=_CONN)
    ],
    "namespace": Annotated[
        str | None, typer.Option(help="Temporal namespace.", rich_help_panel=_CONN)
    ],
    "api_key": Annotated[
        str | None,
        typer.Option(
            help="API key (turns TLS on). Prefer TEMPORAL_API_KEY: flags show in `ps`.",
            rich_help_panel=_CONN,
            show_default=False,
        ),
    ],
    "tls": Annotated[
        bool | None,
        typer.Option("--tls/--no-tls", help="Force TLS on or off.", rich_help_panel=_CONN),
    ],
    "tls_cert": Annotated[
        Path | None, typer.Option(help="mTLS client certificate (PEM).", rich_help_panel=_CONN)
    ],
    "tls_key": Annotated[
        Path | None, typer.Option(help="mTLS client private key (PEM).", rich_help_panel=_CONN)
    ],
    "tls_ca": Annotated[
        Path | None, typer.Option(help="CA certificate of the server (PEM).", rich_help_panel=_CONN)
    ],
    "tls_server_name": Annotated[
        str | None, typer.Option(help="TLS server name (SNI) override.", rich_help_panel=_CONN)
    ],
    "task_queue": Annotated[
        str | None, typer.Option(help="The shared task queue workers poll.", rich_help_panel=_SET)
    ],
    "max_sessions": Annotated[
        int | None, typer.Option(help="Live sessions a worker holds.", rich_help_panel=_SET)
    ],
    "env_threads": Annotated[
        int | None,
        typer.Option(
            help="Sync env calls (reset, step, score, plain tools) a worker runs at once.",
            rich_help_panel=_SET,
        ),
    ],
    "session_idle_ttl_s": Annotated[
        float | None,
        typer.Option(
            flag("session_idle_ttl_s"),
            help="Stop a session idle this long (s).",
            rich_help_panel=_SET,
        ),
    ],
    "drain_timeout_s": Annotated[
        float | None,
        typer.Option(
            flag("drain_timeout_s"),
            help="On SIGTERM/SIGINT: how long live sessions may finish before they are "
            "abandoned (a second signal abandons them at once).",
            rich_help_panel=_SET,
        ),
    ],
    "provision_breaker_after": Annotated[
        int | None,
        typer.Option(
            help="Pause taking provisions after this many in a row find the runtime "
            "unavailable (0: never).",
            rich_help_panel=_SET,
        ),
    ],
    "pool_ttl_s": Annotated[
        float | None,
        typer.Option(
            flag("pool_ttl_s"),
            help="Longest a pooled box idles on a worker (s).",
            rich_help_panel=_SET,
        ),
    ],
    "pool_max_idle": Annotated[
        int | None, typer.Option(help="Most idle boxes per pool on a worker.", rich_help_panel=_SET)
    ],
    "pool_max_warm": Annotated[
        int | None,
        typer.Option(help="Most warm boxes per box config on a worker.", rich_help_panel=_SET),
    ],
    "box_caps": Annotated[
        str | None,
        typer.Option(
            help="Per runtime, the most boxes a worker starts and holds at once: "
            "modal.starting=64,docker.running=32 (none lifts one).",
            rich_help_panel=_SET,
        ),
    ],
    "log_level": Annotated[
        str | None, typer.Option(help="DEBUG, INFO, WARNING or ERROR.", rich_help_panel=_SET)
    ],
    "log_format": Annotated[
        str | None, typer.Option(help="text or json (one object a line).", rich_help_panel=_SET)
    ],
    "metrics_port": Annotated[
        int | None,
        typer.Option(
            help="Serve Prometheus metrics (SDK + episodes) on this port.", rich_help_panel=_SET
        ),
    ],
    "metrics_host": Annotated[
        str | None, typer.Option(help="Address the metrics endpoint binds.", rich_help_panel=_SET)
    ],
    "deployment_name": Annotated[
        str | None, typer.Option(help="Worker Versioning: deployment name.", rich_help_panel=_SET)
    ],
    "build_id": Annotated[
        str | None,
        typer.Option(help="Worker Versioning: this worker's build id.", rich_help_panel=_SET),
    ],
    "workflow_sandbox": Annotated[
        bool | None,
        typer.Option(
            "--workflow-sandbox/--no-workflow-sandbox",
            help="Run the workflows in the Temporal SDK's sandbox (slower).",
            rich_help_panel=_SET,
        ),
    ],
    "require_sandbox": Annotated[
        bool | None,
        typer.Option(
            "--require-sandbox/--no-require-sandbox",
            help="A worker that cannot make sandboxes (the default runtime) refuses to "
            "start; --no-require-sandbox starts it anyway.",
            rich_help_panel=_SET,
        ),
    ],
}
_TEMPORAL_FLAGS = (
    "address",
    "namespace",
    "api_key",
    "tls",
    "tls_cert",
    "tls_key",
    "tls_ca",
    "tls_server_name",
)


def resolve(flags: dict[str, Any]) -> Config:
    """The command's configuration from its flags; a bad setting is one line and exit 2."""
    from episodes.client.config import TemporalFlags, load_config

    conn = TemporalFlags(**{k: flags.pop(k) for k in _TEMPORAL_FLAGS})
    try:
        return load_config(conn, flags, config=flags.pop("config"), profile=flags.pop("profile"))
    except EpisodesError as e:
        fail(str(e))


# What a command that hosts no worker takes of the shared set: where the server is and
# the task queue. The worker's own settings stay accepted (a script that passes them
# keeps working) but are hidden from its --help.
CLIENT_OPTIONS = ("config", "profile", *_TEMPORAL_FLAGS, "task_queue")


def _hidden(annotation: Any) -> Any:
    """The same option, left out of --help."""
    base, info, *rest = get_args(annotation)
    shown = copy.copy(info)
    shown.hidden = True
    return Annotated[(base, shown, *rest)]


def with_config(
    func: Callable[..., Any] | None = None, *, worker: bool = True
) -> Callable[..., Any]:
    """Give a command the shared option set; it receives the resolved `cfg: Config`.
    `worker=False` (a command that hosts no worker): its --help lists only the
    connection options and the task queue."""
    if func is None:
        return functools.partial(with_config, worker=worker)
    options = {
        name: ann if worker or name in CLIENT_OPTIONS else _hidden(ann)
        for name, ann in CONFIG_OPTIONS.items()
    }
    sig = inspect.signature(func)
    own = [p for p in sig.parameters.values() if p.name != "cfg"]
    extra = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=ann)
        for name, ann in options.items()
    ]

    @functools.wraps(func)
    def command(*args: Any, **kwargs: Any) -> Any:
        flags = {name: kwargs.pop(name) for name in CONFIG_OPTIONS}
        return func(*args, cfg=resolve(flags), **kwargs)

    hints = {
        k: eval(v, func.__globals__) if isinstance(v, str) else v  # postponed annotations
        for k, v in func.__annotations__.items()
        if k not in ("cfg", "return")
    }
    command.__annotations__ = {**hints, **options}
    command.__signature__ = sig.replace(  # type: ignore[attr-defined]
        parameters=[p.replace(annotation=hints.get(p.name, p.annotation)) for p in own] + extra
    )
    del command.__wrapped__  # typer must read the signature above, not the function's
    return command


async def until_signalled() -> None:
    """Wait for SIGTERM or SIGINT (a long-running command's end)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    await stop.wait()
