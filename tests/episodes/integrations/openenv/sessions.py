"""What the OpenEnv server's tests share: a logging echo harness over the `script` env
(each message a harness receives is a line of `<dir>/<task>.log`, so a test counts
deliveries), the server in this process, and OpenEnv's own client against it."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from temporalio.client import Client

from episodes import contract
from episodes.client import EpisodesClient
from episodes.integrations.openenv.env import SpecSessions
from episodes.integrations.openenv.server import make_app, serve
from episodes.types.io import EpisodeProgress
from episodes.types.spec import EpisodeSpec
from tests.support.chaos.helpers import HARNESS, TRUSTED, script_spec

MESSAGES = [f"p:{i}" for i in range(4)]


def logging_spec(seen: Path, **over: Any) -> EpisodeSpec:
    """Task `p` sends MESSAGES and expects each echoed; every delivery is logged."""
    command = ["{python}", str(HARNESS), "log", f"dir={seen}"]
    return script_spec(
        f"openenv-{uuid.uuid4().hex[:6]}", {"p": MESSAGES}, command, harness=TRUSTED, **over
    )


def deliveries(seen: Path) -> list[tuple[int, str, int]]:
    """(turn, message, harness pid) of every turn a harness received, in order."""
    path = seen / "p.log"
    lines = path.read_text().splitlines() if path.exists() else []
    return [(d["turn"], d["message"], d["pid"]) for d in map(json.loads, lines)]


def by_harness(seen: Path) -> list[list[str]]:
    """The messages each harness process received, one list per process in order."""
    runs: dict[int, list[str]] = {}
    for _, message, pid in deliveries(seen):
        runs.setdefault(pid, []).append(message)
    return list(runs.values())


@contextlib.asynccontextmanager
async def openenv_server(
    client: Client, queue: str, spec: EpisodeSpec, **options: Any
) -> AsyncIterator[str]:
    """`episodes serve-openenv`'s server for `spec` in this process: its base URL."""
    episodes = EpisodesClient(client, task_queue=queue)
    sessions = SpecSessions(episodes, spec, batch=f"{spec.name}-b", **options)
    async with serve(make_app(sessions, max_sessions=8)) as url:
        yield url


async def progress(client: Client, workflow_id: str) -> EpisodeProgress:
    return await client.get_workflow_handle(workflow_id).query(
        contract.PROGRESS, args=[None, None], result_type=EpisodeProgress
    )
