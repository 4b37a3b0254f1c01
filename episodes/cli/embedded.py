"""The embedded stack: a tuned Temporal dev server plus an in-process worker."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import logging
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from temporalio.client import Client

from episodes.client.config import Config
from episodes.client.connect import connect, connect_config
from episodes.client.devserver import DevServer, port_open
from episodes.client.devstate import forget_server, record_server, running_server
from episodes.errors import DevServerError, SandboxUnavailable, ServerUnreachable
from episodes.payloads.settings import DEV_STATE_DIR, configured_data_converter, dev_storage
from episodes.types.tuning import DEFAULT_TASK_QUEUE

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
    task_queue: str
    # The preferred port was taken by a server that is not this checkout's: the ports
    # were picked free instead (`episodes dev` says so).
    moved_from: int | None = None


def run_queue(prefix: str = DEFAULT_TASK_QUEUE) -> str:
    """The task queue of this checkout's embedded runs (`episodes run` without an
    address, `make demo`): `<prefix>-embedded-<hash of the .episodes path>`.

    No worker of another checkout polls it (a server may be shared by mistake, and
    `episodes dev`'s worker polls `<prefix>`), yet the same checkout's next run polls
    it again: episodes a run left running when it was stopped go on then, instead of
    waiting on a queue nobody polls."""
    where = str(STATE_DIR.resolve()).encode()
    return f"{prefix}-embedded-{hashlib.sha256(where).hexdigest()[:8]}"


NO_SANDBOX_HINT = (
    "--no-require-sandbox or EPISODES_REQUIRE_SANDBOX=false starts the worker anyway, "
    "for specs that do not use the sandbox"
)


def warn_no_sandbox(problem: str | None) -> None:
    """Said once at a worker's start when it runs without sandboxes by request."""
    if problem is not None:
        from episodes.cli.common import err_console

        err_console.print(
            f"[yellow]warning:[/] {problem}; starting anyway (require_sandbox is off): "
            "episodes whose harness runs in the sandbox fail to provision on this worker",
            highlight=False,
            soft_wrap=True,
        )


def check_sandbox(require: bool, *, hint: str) -> str | None:
    """Whether this worker can run its default runtime (a bubblewrap sandbox).

    Required and missing: one line (`SandboxUnavailable`, exit 2) before anything
    starts, instead of a traceback for every provision and the provision breaker's
    back-off. Not required: the reason, for the caller to say once."""
    from episodes.runtimes.sandbox.bwrap import sandbox_problem

    problem = sandbox_problem()
    if problem is not None and require:
        raise SandboxUnavailable(f"{problem} ({hint})")
    return problem


def _server(
    port: int | None, prefer: int | None, ui_port: int | None
) -> tuple[DevServer, int | None]:
    """The dev server to start or reuse, and the preferred port it moved from.

    This checkout's running `episodes dev` server (`.episodes/server.json`) is reused;
    one database has one server, so another embedded run's (it stops with that run) or
    a `port` other than dev's is one line. Any other server on the port is refused (an
    explicit `port`) or avoided (`prefer`: free ports instead); with neither, free ports."""
    db, log = STATE_DIR / "temporal.db", STATE_DIR / "temporal.log"
    own = running_server(STATE_DIR)
    if own is not None and not own.shared:
        raise DevServerError(
            f"another `episodes run` or `make demo` of this checkout (pid {own.owner_pid}) "
            f"has its dev server and {STATE_DIR}/ until it ends: wait for it, or start "
            "`episodes dev` here (runs beside it share its server)"
        )
    if own is not None and port not in (None, own.port):
        raise DevServerError(
            f"this checkout's `episodes dev` (pid {own.owner_pid}) has its dev server on "
            f"{own.address}: use that port, or stop it"
        )
    if own is not None:
        host = own.address.rsplit(":", 1)[0]
        ui = int(own.ui_url.rsplit(":", 1)[1]) if own.ui_url else None
        return DevServer(ip=host, port=own.port, ui_port=ui, headless=ui is None), None
    if port is None and prefer is not None and not port_open("127.0.0.1", prefer):
        port = prefer
    if port is not None:
        return DevServer(port=port, ui_port=ui_port, reuse=False, db_file=db, log_file=log), None
    return DevServer(auto_port=True, db_file=db, log_file=log), prefer


@contextlib.asynccontextmanager
async def embedded_stack(
    *,
    port: int | None = None,
    prefer_port: int | None = None,
    ui_port: int | None = None,
    task_queue: str | None = None,
    max_sessions: int = 256,
    namespace: str = "default",
    require_sandbox: bool = True,
    sandbox_hint: str = NO_SANDBOX_HINT,
    shared: bool = False,
) -> AsyncIterator[Embedded]:
    """A dev server of this checkout's and a worker here on `task_queue` (default: this
    checkout's `run_queue()`); both torn down after (a reused server is left running).

    The server: this checkout's running one when there is one (histories stay in one
    `.episodes/temporal.db`), else one started on `port` (refused when taken), on
    `prefer_port` when free, or on free ports. `shared`: this checkout's other runs may
    use the server while this stack is up (`episodes dev`). Large payloads go to
    `.episodes/payloads/` unless EPISODES_PAYLOADS_STORAGE says otherwise; the client
    and the worker share that one converter.
    """
    from workers.worker import EpisodeWorker, WorkerOptions

    warn_no_sandbox(check_sandbox(require_sandbox, hint=sandbox_hint))
    STATE_DIR.mkdir(exist_ok=True)
    # Two commands starting at once in one checkout must not both start a server on
    # its database: choosing, starting and recording it is done under a file lock.
    with open(STATE_DIR / "server.lock", "w") as lock:
        await asyncio.to_thread(fcntl.flock, lock, fcntl.LOCK_EX)
        server, moved = _server(port, prefer_port, ui_port)
        await asyncio.to_thread(server.start)
        if not server.reused:
            record_server(server, shared=shared, state_dir=STATE_DIR)
    try:
        queue = task_queue or run_queue()
        converter = configured_data_converter(default_storage=dev_storage(STATE_DIR))
        client = await connect(
            server.address, namespace=namespace, timeout_s=30, data_converter=converter
        )
        worker = EpisodeWorker(client, WorkerOptions(task_queue=queue, max_sessions=max_sessions))
        running = asyncio.create_task(worker.run())
        try:
            yield Embedded(server, client, worker, queue, moved)
        finally:
            # No drain: this stack's server stops next, and no other worker takes over.
            worker.request_stop(drain=False)
            with contextlib.suppress(asyncio.CancelledError):
                await running
    finally:
        if not server.reused:
            forget_server(STATE_DIR)
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


WORKER_LOG = "worker.log"
"""The in-process worker's log of an embedded `episodes run`, in `.episodes/`."""

# The loggers of the worker in this process: the SDK's (an activity that failed, with
# its traceback) and ours.
_WORKER_LOGGERS = ("temporalio", "episodes", "workers", "activities")


@contextlib.contextmanager
def worker_log(path: Path) -> Iterator[Path]:
    """The in-process worker's log records go to `path`, not the user's terminal: a
    harness that cannot start is one line under the summary (with its cause), not an
    SDK traceback per episode. Left alone when the process configured logging itself
    (the root logger has a handler)."""
    if logging.getLogger().handlers:
        yield path
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, delay=True)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    saved = []
    for name in _WORKER_LOGGERS:
        logger = logging.getLogger(name)
        saved.append((logger, logger.propagate))
        logger.addHandler(handler)
        logger.propagate = False
    try:
        yield path
    finally:
        for logger, propagate in saved:
            logger.removeHandler(handler)
            logger.propagate = propagate
        handler.close()


def own_histories(cfg: Config) -> bool:
    """No address configured anywhere, no dev server of this checkout running, and its
    `.episodes/temporal.db` here: what an embedded `episodes run` leaves behind. The
    commands that read histories then serve that database themselves."""
    return (
        cfg.address is None
        and running_server(STATE_DIR) is None
        and (STATE_DIR / "temporal.db").exists()
    )


async def reading_client(
    stack: contextlib.AsyncExitStack, cfg: Config, **client_options: Any
) -> Client:
    """A client for commands that read histories (`show`, `view`, `export`): the
    configured server; with no address configured anywhere and no dev server of this
    checkout running, this checkout's own histories (`.episodes/temporal.db`, which an
    embedded `episodes run` keeps) served by a dev server started for the command and
    stopped after it, said on stderr."""
    from episodes.cli.common import err_console

    db = STATE_DIR / "temporal.db"
    if not own_histories(cfg):
        try:
            return await connect_config(cfg, **client_options)
        except ServerUnreachable as e:
            if cfg.address is not None:
                raise
            raise ServerUnreachable(
                f"{e}; no address is configured and no .episodes/ here holds a run's "
                "histories: run this where `episodes run` ran, or start `episodes dev`"
            ) from None
    err_console.print(
        f"reading this checkout's histories ({db}): its dev server runs for this command",
        highlight=False,
        soft_wrap=True,
    )
    with open(STATE_DIR / "server.lock", "w") as lock:
        await asyncio.to_thread(fcntl.flock, lock, fcntl.LOCK_EX)
        server = DevServer(auto_port=True, db_file=db, log_file=STATE_DIR / "temporal.log")
        await asyncio.to_thread(server.start)
        stack.push_async_callback(asyncio.to_thread, server.stop)
    return await connect(server.address, namespace=cfg.namespace, timeout_s=30, **client_options)


async def client_for(
    stack: contextlib.AsyncExitStack, cfg: Config
) -> tuple[Client, str | None, str]:
    """A client for the configured server, or (no address configured anywhere) the
    embedded stack entered on `stack`.

    Returns the client, the UI address when the embedded stack serves the run, and the
    task queue to start on: the configured one, or the embedded worker's (`run_queue`:
    no other checkout's worker takes the run's episodes).
    """
    if cfg.address is not None:
        return await connect_config(cfg), None, cfg.settings.task_queue
    from episodes.cli.common import console

    stack.enter_context(worker_log(STATE_DIR / WORKER_LOG))
    with console.status("starting the embedded Temporal dev server and a worker"):
        emb = await stack.enter_async_context(
            embedded_stack(
                task_queue=run_queue(cfg.settings.task_queue),
                namespace=cfg.namespace,
                require_sandbox=cfg.settings.require_sandbox,
            )
        )
    return emb.client, emb.server.ui_url, emb.task_queue
