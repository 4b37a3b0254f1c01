"""`episodes serve-openenv SPEC --port N`: serve SPEC as an OpenEnv environment
(`episodes.integrations.openenv`), each OpenEnv session a durable interactive episode
run by the workers of the configured Temporal server."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from uuid import uuid4

from episodes.cli.common import console, err_console, until_signalled
from episodes.client.config import Config
from episodes.errors import EpisodesError


def default_batch(spec_name: str) -> str:
    """A batch of this server's own: sessions numbered from 0 never meet an earlier
    server's running ones."""
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    return f"{spec_name}-openenv-{stamp}-{uuid4().hex[:4]}"


async def serve_openenv(
    spec_path: Path,
    *,
    cfg: Config,
    host: str,
    port: int,
    batch: str | None,
    max_connections: int,
    idle_timeout_s: float,
) -> None:
    from episodes.envs import check_env_ref
    from episodes.specfile import load_spec

    # Everything that can be wrong with the spec is found before anything starts.
    spec = load_spec(spec_path)
    check_env_ref(spec.env)
    try:
        from episodes.integrations.openenv.env import SpecSessions
        from episodes.integrations.openenv.server import make_app, serve
    except ImportError as e:
        raise EpisodesError(
            f"serve-openenv needs OpenEnv ({e.name} is missing): pip install 'episodes[openenv]'"
        ) from None
    from episodes.client import EpisodesClient
    from episodes.client.connect import connect_config

    episodes = EpisodesClient(await connect_config(cfg), task_queue=cfg.settings.task_queue)
    batch = batch or default_batch(spec.name)
    sessions = SpecSessions(episodes, spec, batch=batch, idle_timeout_s=idle_timeout_s)
    if host not in ("127.0.0.1", "localhost", "::1"):
        err_console.print(
            f"[yellow]warning:[/] serving on {host}: anyone who reaches it runs episodes "
            "on your workers (OpenEnv's server has no login)",
            highlight=False,
        )
    async with serve(make_app(sessions, max_sessions=max_connections), host=host, port=port) as url:
        console.print(
            f"[green]✓[/] OpenEnv server for spec [bold]{spec.name}[/] at [bold]{url}[/] "
            f"(/ws, /reset, /step, /health): {len(sessions.tasks)} task(s), batch {batch}, "
            f"Temporal at {episodes.client.service_client.config.target_host}, "
            f"task queue {episodes.task_queue} — Ctrl-C stops it (open sessions park)",
            highlight=False,
            soft_wrap=True,
        )
        await until_signalled()
