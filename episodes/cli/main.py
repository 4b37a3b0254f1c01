"""`episodes`: the command line. Each command is a thin shell over the library."""

from __future__ import annotations

import asyncio
import faulthandler
import inspect
import os
import signal
import sys
from pathlib import Path
from typing import Annotated

import typer

from episodes.cli import common
from episodes.cli.batch_status import app as batch_app
from episodes.cli.dev import DEV_PORT, TaskQueue, dev  # noqa: F401 (their old path)
from episodes.cli.doctor import doctor, setup
from episodes.cli.park import park, resume
from episodes.cli.priority import (
    FairnessKey,
    FairnessWeight,
    MaxCost,
    MaxEpisodeSeconds,
    MaxModelCalls,
    MaxModelTokens,
    Oversample,
    Priority,
    priority_kwargs,
)
from episodes.cli.schedule import app as schedule_app
from episodes.client.config import Config
from episodes.client.exit import run_main

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Durable multi-turn agent episodes on Temporal.",
)

app.command()(dev)


@app.command()
@common.with_config
def worker(cfg: Config) -> None:
    """Run a worker against any Temporal server; SIGTERM/SIGINT stop it gracefully."""
    from episodes.cli.worker import run_worker

    common.run(run_worker(cfg))


@app.command("run")
@common.with_config
def run_cmd(
    spec: Annotated[Path, typer.Argument(help="Spec file (YAML or JSON).")],
    cfg: Config,
    out: Annotated[Path | None, typer.Option(help="Write one EpisodeResult JSON per line.")] = None,
    batch_id: Annotated[
        str | None,
        typer.Option("--batch-id", help="Batch id for workflow ids (default: spec name)."),
    ] = None,
    fresh: Annotated[
        bool,
        typer.Option(
            "--fresh",
            help="Run the spec afresh under a new batch id derived from the old one "
            "(NAME-2, NAME-3, ...) instead of re-attaching to its finished episodes.",
        ),
    ] = False,
    concurrency: Annotated[int | None, typer.Option(help="Episodes in flight.")] = None,
    on_server: Annotated[
        bool,
        typer.Option(
            "--on-server",
            help="Run as one EvalBatchWorkflow on the server (durable, metrics, pass@k) "
            "instead of starting each episode from here.",
        ),
    ] = False,
    batch: Annotated[
        bool, typer.Option("--batch", hidden=True, help="Deprecated: --on-server.")
    ] = False,
    pass_threshold: Annotated[
        float, typer.Option(help="With --on-server: an episode passes when reward >= this.")
    ] = 1.0,
    policy_version: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="Dispatch every episode at this policy version (the spec's "
            "model.policy_version, recorded on each model call).",
        ),
    ] = None,
    priority: Priority = None,
    fairness_key: FairnessKey = None,
    fairness_weight: FairnessWeight = None,
    max_model_tokens: MaxModelTokens = None,
    max_model_calls: MaxModelCalls = None,
    max_episode_seconds: MaxEpisodeSeconds = None,
    max_cost: MaxCost = None,
    oversample: Oversample = None,
) -> None:
    """Run every task x sample of SPEC, show progress, print a summary.

    With no address configured (flag, TEMPORAL_ADDRESS or a profile) it brings up the
    embedded dev server and a worker for the run. Exit status 1 when a configuration
    error stopped episodes or every episode failed (the reason under the summary)."""
    from episodes.cli.run import exit_code, run_spec

    priority_options = priority_kwargs(
        priority,
        fairness_key,
        fairness_weight,
        max_model_tokens,
        max_model_calls,
        max_episode_seconds,
        max_cost,
    )
    if batch:
        common.err_console.print(
            "[yellow]warning:[/] --batch is deprecated: use --on-server (--batch-id names "
            "the batch)",
            highlight=False,
        )
    if on_server or batch:
        from episodes.cli.batch import run_spec_batch

        if oversample:
            common.fail("--oversample cuts stragglers in groups run from here: drop --on-server")
        code = common.run(
            run_spec_batch(
                spec,
                cfg=cfg,
                out=out,
                batch=batch_id,
                concurrency=concurrency,
                pass_threshold=pass_threshold,
                policy_version=policy_version,
                priority_options=priority_options,
                fresh=fresh,
            )
        )
        raise typer.Exit(code)
    results = common.run(
        run_spec(
            spec,
            cfg=cfg,
            out=out,
            batch=batch_id,
            concurrency=concurrency,
            policy_version=policy_version,
            priority_options=priority_options,
            oversample=oversample,
            fresh=fresh,
        )
    )
    raise typer.Exit(exit_code(results))


app.add_typer(schedule_app, name="schedule")
app.add_typer(batch_app, name="batch")
harbor_app = typer.Typer(no_args_is_help=True, help="Harbor tasks (docs/harbor.md).")
app.add_typer(harbor_app, name="harbor")


@harbor_app.command("check")
def harbor_check(
    path: Annotated[Path, typer.Argument(help="A Harbor task directory, or a folder of them.")],
    agents: Annotated[
        bool, typer.Option(help="Also run the oracle (must score 1) and nop (must score 0).")
    ] = True,
) -> None:
    """Validate Harbor tasks: the schema, the files, the oracle passes, nop scores 0.

    One line per problem; exit status 1 if there was any. Runs real episodes on the
    local Docker engine (the task images are built once)."""
    from episodes.envs.harbor.check import main as check

    raise typer.Exit(check(path, run_agents=agents))


app.command()(doctor)
app.command()(setup)


@app.command()
@common.with_config(worker=False)
def show(
    workflow_id: Annotated[str, typer.Argument(help="The episode's workflow id.")],
    cfg: Config,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Print an episode's transcript turn by turn (read from its history)."""
    from episodes.cli.show import show_episode

    common.run(show_episode(workflow_id, cfg=cfg, as_json=as_json))


@app.command("fork")
@common.with_config(worker=False)
def fork_cmd(
    workflow_id: Annotated[str, typer.Argument(help="The episode to fork (running or done).")],
    cfg: Config,
    at_turn: Annotated[int, typer.Option(help="Replay its turns before this one, then go on.")],
    samples: Annotated[int, typer.Option(help="How many branches.")] = 1,
    out: Annotated[Path | None, typer.Option(help="Write the results here (JSON lines).")] = None,
    policy_version: Annotated[
        int | None, typer.Option(help="The branches' policy version (recorded on their calls).")
    ] = None,
) -> None:
    """Branches of an episode (`ID.f<K>.<i>`): each replays its first K turns exactly
    (no model call for them), then goes on live."""
    from episodes.cli.fork import failed_line, fork_command

    results = common.run(
        fork_command(
            workflow_id,
            cfg=cfg,
            at_turn=at_turn,
            samples=samples,
            out=out,
            policy_version=policy_version,
        )
    )
    if line := failed_line(results):
        common.fail(line, code=1)


app.command()(park)
app.command()(resume)


@app.command("export")
@common.with_config(worker=False)
def export_cmd(
    batch: Annotated[str, typer.Argument(help="The batch id (its episodes' EpisodeBatch).")],
    cfg: Config,
    out: Annotated[Path, typer.Option(help="FILE.parquet or FILE.jsonl: one row per sample.")],
    normalize_std: Annotated[
        bool, typer.Option(help="Divide each advantage by its group's reward std.")
    ] = False,
    skip_incomplete: Annotated[
        bool,
        typer.Option(help="Leave out episodes lacking token data instead of failing (exit 1)."),
    ] = False,
    estimator: Annotated[
        str, typer.Option(help="The advantage estimator: grpo (reward - group mean) or rloo.")
    ] = "grpo",
    skip_diverged: Annotated[
        bool,
        typer.Option(
            help="Leave out episodes whose replay diverged; their group gets no advantage."
        ),
    ] = False,
) -> None:
    """Write a batch's training samples (token ids, mask, logprobs, reward, advantage)."""
    from episodes.cli.export import export_batch
    from episodes.training.estimators import ESTIMATORS

    if estimator not in ESTIMATORS:
        common.fail(f"--estimator {estimator}: one of {', '.join(ESTIMATORS)}", code=2)
    common.run(
        export_batch(
            batch,
            cfg=cfg,
            out=out,
            normalize_std=normalize_std,
            skip_incomplete=skip_incomplete,
            estimator=estimator,  # type: ignore[arg-type]
            skip_diverged=skip_diverged,
        )
    )


@app.command("compare")
@common.with_config(worker=False)
def compare_cmd(
    batch_a: Annotated[str, typer.Argument(help="The baseline batch id (A).")],
    batch_b: Annotated[str, typer.Argument(help="The batch compared with it (B).")],
    cfg: Config,
    threshold: Annotated[
        float, typer.Option(help="An episode passes when its reward is at least this.")
    ] = 1.0,
    alpha: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Significant when the p-value is below this.")
    ] = 0.05,
    seed: Annotated[int, typer.Option(help="The bootstrap's and the permutation test's seed.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the verdict as JSON.")] = False,
) -> None:
    """Compare two eval batches task by task: B minus A in mean reward, its interval and
    a paired test's p-value (is it beyond the noise?), each batch's figures with their
    intervals, the tasks that flipped, and a warning for each pin (spec, image, model,
    package) the two batches' manifests disagree on. Read from the histories."""
    from episodes.cli.compare import compare_batches

    common.run(
        compare_batches(
            batch_a,
            batch_b,
            cfg=cfg,
            threshold=threshold,
            alpha=alpha,
            seed=seed,
            as_json=as_json,
        )
    )


@app.command()
@common.with_config(worker=False)
def view(
    cfg: Config,
    port: Annotated[int, typer.Option(help="Port to serve on (0: any free port).")] = 8234,
    host: Annotated[
        str, typer.Option(help="Listen address (the viewer has no login: keep it local).")
    ] = "127.0.0.1",
    ui_address: Annotated[
        str | None,
        typer.Option(
            help="The Temporal UI, for links to each episode's workflow (default: this "
            "checkout's `episodes dev` UI when no address is configured, else "
            "http://127.0.0.1:8233).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Serve a web viewer of batches and episodes (read from Temporal) and print its address."""
    from episodes.cli.view import serve_viewer
    from episodes.client.devstate import running_server

    if ui_address is None:
        own = running_server() if cfg.address is None else None
        ui_address = (own.ui_url if own else None) or "http://127.0.0.1:8233"
    common.run(serve_viewer(cfg, host=host, port=port, ui_address=ui_address))


@app.command("serve-openenv")
@common.with_config(worker=False)
def serve_openenv(
    spec: Annotated[Path, typer.Argument(help="Spec file (YAML or JSON).")],
    cfg: Config,
    port: Annotated[int, typer.Option(help="Port to serve on (0: any free port).")] = 8000,
    host: Annotated[
        str, typer.Option(help="Listen address (the server has no login: keep it local).")
    ] = "127.0.0.1",
    batch_id: Annotated[
        str | None,
        typer.Option(
            "--batch-id",
            help="The batch the sessions belong to (`episodes export` reads it); a new "
            "one per server run (default: SPEC's name, -openenv-, the start time).",
            show_default=False,
        ),
    ] = None,
    max_connections: Annotated[
        int, typer.Option(min=1, help="Open /ws connections at most (each one session).")
    ] = 256,
    idle_timeout_s: Annotated[
        float,
        typer.Option(min=1, help="A session no step reached for this long ends (idle_timeout)."),
    ] = 600.0,
) -> None:
    """Serve SPEC as an OpenEnv environment: OpenEnv's HTTP routes and /ws on PORT.

    Each OpenEnv session is a durable interactive episode (a workflow on the configured
    Temporal server, run by its workers) in which the trainer is the policy: reset()
    opens one (reset(episode_id=ID) re-attaches), step() is one turn delivered once, the
    last step or a closed connection ends and scores it, a dropped connection parks it
    until the client comes back (docs/integrations/openenv.md)."""
    from episodes.cli.serve_openenv import serve_openenv as serve

    common.run(
        serve(
            spec,
            cfg=cfg,
            host=host,
            port=port,
            batch=batch_id,
            max_connections=max_connections,
            idle_timeout_s=idle_timeout_s,
        )
    )


@app.command("codec-server")
def codec_server(
    host: Annotated[str, typer.Option(help="Listen address (non-loopback needs auth).")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(help="Listen port.")] = 8081,
    ui_origin: Annotated[
        str, typer.Option(help="The Temporal UI's origin, the only one CORS answers.")
    ] = "http://localhost:8233",
    auth_env: Annotated[
        str, typer.Option(help="Variable holding the exact Authorization header value.")
    ] = "EPISODES_CODEC_SERVER_AUTH",
) -> None:
    """Serve /encode and /decode for the Temporal UI and CLI with this process's payload
    settings (EPISODES_PAYLOAD_KEYS*, EPISODES_PAYLOADS_*): decrypts, resolves references."""
    from episodes.errors import EpisodesError
    from episodes.payloads.codec_server import codec_server_command
    from episodes.payloads.settings import existing_dev_storage, payloads_config

    try:
        # Like `episodes show`: with no storage set, resolve what `episodes dev` stored.
        config = payloads_config(default_storage=existing_dev_storage())
        codec_server_command(
            host=host, port=port, ui_origin=ui_origin, auth_env=auth_env, config=config
        )
    except EpisodesError as e:
        common.fail(str(e))


@app.command()
def cleanup(
    worker_id: Annotated[
        str | None, typer.Option("--worker", help="Only this worker's boxes.")
    ] = None,
) -> None:
    """Remove Docker containers this package started (all, or one worker's), and delete
    the Modal sandboxes and Prime VMs that dead workers of this host left behind."""
    from episodes.errors import RuntimeUnavailable
    from episodes.runtimes.docker.engine import cleanup_orphans
    from workers.orphans import reap_orphan_boxes

    try:
        removed = cleanup_orphans(worker=worker_id)
        common.console.print(f"removed {removed} container(s)", highlight=False)
    except RuntimeUnavailable as e:
        common.err_console.print(f"containers: {e}", highlight=False)
    deleted = asyncio.run(reap_orphan_boxes(worker_id))
    common.console.print(f"deleted {deleted} cloud box(es) of dead workers", highlight=False)


def _one_line_spec_warnings() -> None:
    """A spec warning (an inline secret) is one `warning:` line on stderr, not a traceback."""
    import warnings

    from episodes.types.spec import SpecWarning

    default = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, SpecWarning):
            common.err_console.print(f"[yellow]warning:[/] {message}", highlight=False)
            return
        default(message, category, filename, lineno, file, line)

    warnings.showwarning = show


def reflow_help(group: typer.Typer) -> None:
    """Each command's help as paragraphs, not the docstring's source lines: rich keeps
    a docstring's line breaks, so a terminal narrower than the source broke sentences
    mid-line (`episodes --help` at 80 columns)."""
    for info in group.registered_commands:
        text = info.help or inspect.getdoc(info.callback) or ""
        info.help = "\n\n".join(
            " ".join(line.strip() for line in para.splitlines()) for para in text.split("\n\n")
        )
    for sub in group.registered_groups:
        if sub.typer_instance is not None:
            reflow_help(sub.typer_instance)


def main() -> None:
    # `kill -USR1 PID` prints where every thread of a command is (one that seems stuck).
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    reflow_help(app)
    _one_line_spec_warnings()
    # `env: my_envs:MyEnv` in a spec should find my_envs.py where the user runs us.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    run_main(app)


if __name__ == "__main__":
    main()
