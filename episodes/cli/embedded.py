"""The embedded stack: a tuned Temporal dev server plus an in-process worker."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from temporalio.client import Client

from episodes.client.connect import connect
from episodes.client.devserver import DevServer

if TYPE_CHECKING:
    # Only for the annotation: the worker (and its activities) loads when the stack starts.
    from workers.worker import EpisodeWorker

STATE_DIR = Path(".episodes")


@dataclass
class Embedded:
    server: DevServer
    client: Client
    worker: EpisodeWorker


@contextlib.asynccontextmanager
async def embedded_stack(
    *,
    port: int = 7233,
    ui_port: int | None = None,
    task_queue: str = "episodes",
    max_sessions: int = 256,
    namespace: str = "default",
) -> AsyncIterator[Embedded]:
    """Start (or reuse) the dev server on `port`, run a worker here, tear both down after."""
    from workers.worker import EpisodeWorker, WorkerOptions

    STATE_DIR.mkdir(exist_ok=True)
    server = DevServer(
        port=port,
        ui_port=ui_port,
        db_file=STATE_DIR / "temporal.db",
        log_file=STATE_DIR / "temporal.log",
    )
    await asyncio.to_thread(server.start)
    try:
        client = await connect(server.address, namespace=namespace, timeout_s=30)
        worker = EpisodeWorker(
            client, WorkerOptions(task_queue=task_queue, max_sessions=max_sessions)
        )
        running = asyncio.create_task(worker.run())
        try:
            yield Embedded(server, client, worker)
        finally:
            worker.request_stop()
            with contextlib.suppress(asyncio.CancelledError):
                await running
    finally:
        await asyncio.to_thread(server.stop)


async def client_for(
    stack: contextlib.AsyncExitStack, *, address: str | None, namespace: str, task_queue: str
) -> tuple[Client, str | None]:
    """A client for `address`, or (no address) the embedded stack entered on `stack`.

    Returns the client and the UI address when we started the server.
    """
    if address is not None:
        return await connect(address, namespace=namespace), None
    from episodes.cli.common import console

    with console.status("starting the embedded Temporal dev server and a worker"):
        emb = await stack.enter_async_context(
            embedded_stack(task_queue=task_queue, namespace=namespace)
        )
    return emb.client, emb.server.ui_url
