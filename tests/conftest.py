"""Shared fixtures: a real Temporal dev server and a real worker for integration tests."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

# Fixtures shared across folders (their tests live where their code does).
pytest_plugins = ["tests.support.fixtures", "tests.support.chaos.fixtures"]

ROOT = Path(__file__).resolve().parent.parent
SCRIPTED = ROOT / "tests" / "support" / "harnesses" / "scripted_harness.py"


def scripted_command(mode: str, *args: str) -> list[str]:
    """argv for the misbehaving harness in `mode`, runnable from any cwd."""
    return [sys.executable, str(SCRIPTED), mode, *args]


@pytest.fixture(scope="session", autouse=True)
def private_box_ledgers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Cloud-box ledgers of this test run go to a directory of its own, not ~/.cache: for
    every test (the session's worker reaps from it too), not only the runtimes'."""
    from episodes.runtimes.cloud import ledger

    saved = os.environ.get(ledger.DIR_ENV)
    os.environ[ledger.DIR_ENV] = str(tmp_path_factory.mktemp("box-ledgers"))
    yield
    if saved is None:
        os.environ.pop(ledger.DIR_ENV, None)
    else:
        os.environ[ledger.DIR_ENV] = saved


@pytest.fixture(scope="session")
def dev_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from episodes.client.devserver import DevServer

    tmp = tmp_path_factory.mktemp("temporal")
    server = DevServer(
        auto_port=True,
        db_file=tmp / "temporal.db",
        log_file=tmp / "server.log",
    )
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
async def client(dev_server):  # type: ignore[no-untyped-def]
    from episodes.client.connect import connect

    return await connect(dev_server.address, timeout_s=30)


@pytest.fixture(scope="session")
async def worker(client) -> AsyncIterator[object]:  # type: ignore[no-untyped-def]
    """One in-process worker on the shared queue for the whole session."""
    from workers.worker import EpisodeWorker, WorkerOptions

    # No provision breaker: tests provoke unavailable runtimes on purpose (a Docker
    # spec on a machine without an engine), and it would pause this shared worker for
    # the tests after them. Its own tests: tests/episodes/test_breaker.py.
    w = EpisodeWorker(
        client,
        WorkerOptions(task_queue="episodes-test", reap_interval_s=2, provision_breaker_after=0),
    )
    task = asyncio.create_task(w.run())
    yield w
    w.request_stop()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait_for(task, 30)


# The Temporal SDK's native threads can abort CPython's finalization after a run that
# used clients (sdk-python#300), turning a green run into exit code -6. Leave the
# same way our commands do, once pytest has reported everything.
_exit_status: list[int] = []


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _exit_status.append(int(exitstatus))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    if _exit_status and not hasattr(config, "workerinput"):
        from episodes.client.exit import exit_process

        exit_process(_exit_status[-1])
