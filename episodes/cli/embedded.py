"""The embedded stack: a tuned Temporal dev server plus an in-process worker."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from temporalio.client import Client

from episodes.client.config import Config
from episodes.client.connect import connect, connect_config
from episodes.client.devserver import DevServer
from episodes.payloads.settings import DEV_STATE_DIR, configured_data_converter, dev_storage

if TYPE_CHECKING:
    from episodes.viewer.app import Running

    # Only for the annotation: the worker (and its activities) loads when the stack starts.
    from workers.worker import EpisodeWorker

STATE_DIR = DEV_STATE_DIR


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
    """Start (or reuse) the dev server on `port`, run a worker here, tear both down after.

    Large payloads go to `.episodes/payloads/` unless EPISODES_PAYLOADS_STORAGE says
    otherwise; the client and the worker share that one converter.
    """
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
        converter = configured_data_converter(default_storage=dev_storage(STATE_DIR))
        client = await connect(
            server.address, namespace=namespace, timeout_s=30, data_converter=converter
        )
        worker = EpisodeWorker(
            client, WorkerOptions(task_queue=task_queue, max_sessions=max_sessions)
        )
        running = asyncio.create_task(worker.run())
        try:
            yield Embedded(server, client, worker)
        finally:
            # No drain: this stack's server stops next, and no other worker takes over.
            worker.request_stop(drain=False)
            with contextlib.suppress(asyncio.CancelledError):
                await running
    finally:
        await asyncio.to_thread(server.stop)


@contextlib.asynccontextmanager
async def viewer_beside(stack: Embedded, port: int) -> AsyncIterator[Running]:
    """The episodes viewer on the stack's client, linking to its Temporal UI. A taken
    port does not stop `episodes dev`: the viewer takes a free one instead."""
    from episodes.viewer import serve

    ui = stack.server.ui_url or "http://127.0.0.1:8233"
    async with contextlib.AsyncExitStack() as exits:
        try:
            viewer = await exits.enter_async_context(serve(stack.client, port=port, ui_address=ui))
        except OSError as e:
            if port == 0:
                raise
            from episodes.cli.common import err_console

            err_console.print(
                f"[yellow]viewer port {port} is taken ({e.strerror}): using a free one",
                highlight=False,
            )
            viewer = await exits.enter_async_context(serve(stack.client, port=0, ui_address=ui))
        yield viewer


async def client_for(stack: contextlib.AsyncExitStack, cfg: Config) -> tuple[Client, str | None]:
    """A client for the configured server, or (no address configured anywhere) the
    embedded stack entered on `stack`.

    Returns the client and the UI address when we started the server.
    """
    if cfg.address is not None:
        return await connect_config(cfg), None
    task_queue, namespace = cfg.settings.task_queue, cfg.namespace
    from episodes.cli.common import console

    with console.status("starting the embedded Temporal dev server and a worker"):
        emb = await stack.enter_async_context(
            embedded_stack(task_queue=task_queue, namespace=namespace)
        )
    return emb.client, emb.server.ui_url
