"""No leaked cloud boxes: a worker killed with live Modal sandboxes or Prime VMs leaves
a ledger naming them, and the next worker start (or `episodes cleanup`) deletes them.

On the SDK fakes, whose `cloud.live()` is what the platform would still bill for.
A "killed" worker is a runtime dropped without stop() by a process whose memory is
gone (the in-process ledger state is cleared) and whose pid no longer exists (the
ledger's writer identity is a pid that has exited).
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from episodes.runtimes.cloud import ledger
from episodes.runtimes.cloud.modal import ModalRuntime, destroy_sandbox
from episodes.runtimes.cloud.prime import PrimeRuntime
from episodes.types.runtime import ModalConfig, PrimeConfig
from tests.support.fakes import modal_fake
from workers.orphans import reap_orphan_boxes

prime_fake = pytest.importorskip("tests.support.fakes.prime_fake")
e2b_fake = pytest.importorskip("tests.support.fakes.e2b_fake")
T = 30.0


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@pytest.fixture
def ledgers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv(ledger.DIR_ENV, str(tmp_path))
    yield tmp_path


@pytest.fixture
def dead_writer(monkeypatch: pytest.MonkeyPatch) -> None:
    """What this process records from now on names a worker process that has exited."""
    pid = dead_pid()
    monkeypatch.setattr(ledger, "_whoami", lambda: (socket.gethostname(), pid, 1.0))


def worker_id() -> str:
    return f"{socket.gethostname()}-{dead_pid()}-{uuid.uuid4().hex[:6]}"


def crash(path: Path) -> None:
    """The worker's memory is gone: only the file is left."""
    ledger._live.pop(path, None)


def modal_box(sdk: Any, worker: str) -> ModalRuntime:
    workdir = tempfile.mkdtemp(prefix="fake-modal-work-")
    return ModalRuntime(ModalConfig(workdir=workdir), labels={"worker": worker}, sdk=sdk)


def prime_box(sdk: Any, worker: str, tmp_path: Path) -> PrimeRuntime:
    config = PrimeConfig(workdir=str(tmp_path / "work"))
    return PrimeRuntime(config, labels={"worker": worker}, sdk=sdk)


async def test_a_killed_workers_sandbox_and_vm_are_deleted_at_the_next_start(
    ledgers: Path, dead_writer: None, tmp_path: Path
) -> None:
    modal, prime = modal_fake.fake_sdk(), prime_fake.fake_sdk()
    wid = worker_id()
    boxes = [modal_box(modal, wid), prime_box(prime, wid, tmp_path)]
    for box in boxes:
        await asyncio.wait_for(box.start(), T)
    ids = [b.id for b in boxes]
    assert modal.cloud.live() == [ids[0]] and prime.cloud.live() == [ids[1]]
    path = ledger.ledger_path(wid)
    assert [(b.runtime, b.box_id) for b in ledger.read(path)] == [
        ("modal", ids[0]),
        ("prime", ids[1]),
    ]
    del boxes, box  # never stopped
    crash(path)

    assert await reap_orphan_boxes(sdks={"modal": modal, "prime": prime}) == 2
    assert modal.cloud.live() == [] and prime.cloud.live() == []
    assert prime.cloud.deleted == [ids[1]]
    assert not path.exists()
    assert await reap_orphan_boxes(sdks={"modal": modal, "prime": prime}) == 0


async def test_a_killed_workers_e2b_sandbox_is_deleted_at_the_next_start(
    ledgers: Path, dead_writer: None, tmp_path: Path
) -> None:
    from episodes.runtimes.cloud.e2b import E2BRuntime
    from episodes.types.runtime import E2BConfig

    e2b = e2b_fake.fake_sdk()
    wid = worker_id()
    config = E2BConfig(workdir=str(tmp_path / "work"), python=sys.executable)
    box = E2BRuntime(config, labels={"worker": wid}, sdk=e2b)
    await asyncio.wait_for(box.start(), T)
    assert e2b.cloud.live() == [box.id]
    path = ledger.ledger_path(wid)
    assert [(b.runtime, b.box_id) for b in ledger.read(path)] == [("e2b", box.id)]
    del box  # never stopped
    crash(path)

    assert await reap_orphan_boxes(sdks={"e2b": e2b}) == 1
    assert e2b.cloud.live() == [] and not path.exists()


async def test_the_box_is_in_the_ledger_before_the_first_await_after_create(
    ledgers: Path, tmp_path: Path
) -> None:
    # Prime waits for the VM to run after create returns: a kill in that wait must
    # find the VM already recorded.
    prime = prime_fake.fake_sdk()
    prime.cloud.creation_delay_s = 600
    box = prime_box(prime, "w-creating", tmp_path)
    start = asyncio.ensure_future(box.start())
    try:
        await asyncio.wait_for(_until(lambda: bool(box.id)), T)
        assert [b.box_id for b in ledger.read(ledger.ledger_path("w-creating"))] == [box.id]
    finally:
        start.cancel()
        await asyncio.gather(start, return_exceptions=True)
    # The cancelled start deleted its VM, and that is in the ledger too.
    assert prime.cloud.live() == []
    assert not ledger.ledger_path("w-creating").exists()


async def _until(predicate: Any) -> None:
    while not predicate():
        await asyncio.sleep(0.01)


async def test_a_live_workers_boxes_are_left_alone_and_a_stop_clears_its_ledger(
    ledgers: Path,
) -> None:
    modal = modal_fake.fake_sdk()
    box = modal_box(modal, "w-alive")  # recorded by this (live) process
    await asyncio.wait_for(box.start(), T)
    path = ledger.ledger_path("w-alive")
    crash(path)  # even with no memory of it, a live pid keeps its boxes
    assert await reap_orphan_boxes(sdks={"modal": modal}) == 0
    assert modal.cloud.live() == [box.id]
    ledger._live[path] = {box.id}
    await asyncio.wait_for(box.stop(), T)
    assert modal.cloud.live() == [] and not path.exists()


async def test_a_box_that_cannot_be_deleted_stays_in_the_ledger_for_a_later_try(
    ledgers: Path, dead_writer: None
) -> None:
    modal = modal_fake.fake_sdk()
    wid = worker_id()
    box = modal_box(modal, wid)
    await asyncio.wait_for(box.start(), T)
    crash(ledger.ledger_path(wid))

    async def unreachable(sandbox_id: str, client: Any = None) -> Any:
        raise ConnectionError("the service does not answer")

    broken = modal_fake.fake_sdk(modal.cloud)
    broken.Sandbox.from_id = type("F", (), {"aio": staticmethod(unreachable)})()
    assert await reap_orphan_boxes(sdks={"modal": broken}) == 0
    assert modal.cloud.live() == [box.id]
    assert await reap_orphan_boxes(wid, sdks={"modal": modal}) == 1
    assert modal.cloud.live() == []


async def test_an_already_gone_box_counts_as_deleted(ledgers: Path) -> None:
    modal, prime = modal_fake.fake_sdk(), prime_fake.fake_sdk()
    await destroy_sandbox("sb-never-made", modal)  # NotFoundError: nothing to do
    from episodes.runtimes.cloud.prime import destroy_vm

    await destroy_vm("vm-never-made", prime)  # HTTP 404: nothing to do


def test_episodes_cleanup_deletes_a_dead_workers_boxes(
    ledgers: Path, dead_writer: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from episodes.cli.main import app

    modal = modal_fake.fake_sdk()
    wid = worker_id()

    async def leak() -> str:
        box = modal_box(modal, wid)
        await asyncio.wait_for(box.start(), T)
        return box.id

    sandbox = asyncio.run(leak())
    crash(ledger.ledger_path(wid))
    assert modal.cloud.live() == [sandbox]
    # The real SDK would be loaded; this run gets the fake in its place.
    monkeypatch.setattr(ledger, "destroyer", lambda runtime: (destroy_sandbox, lambda: modal))
    # --worker: the Docker half then touches only that (unused) worker's containers.
    result = CliRunner().invoke(app, ["cleanup", "--worker", wid])
    assert result.exit_code == 0, result.output
    assert "deleted 1 cloud box(es)" in result.output
    assert modal.cloud.live() == []
    assert json.dumps(ledger.read(ledger.ledger_path(wid)), default=str) == "[]"
