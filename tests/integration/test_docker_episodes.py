"""Docker-backed episodes through Temporal and `episodes run`, against a real engine."""

from __future__ import annotations

import json
import socket
import uuid

import pytest
import yaml

from tests.conftest import ROOT
from tests.integration.test_cli import episodes
from tests.runtimes.backends import docker as backend

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module", autouse=True)
def _engine() -> None:
    reason = backend.skip_reason()
    if reason:
        pytest.skip(reason)


def _containers(label: str) -> list[dict]:
    return backend.client().api.containers(all=True, filters={"label": [label]})


async def test_docker_batch_through_episodes_run(tmp_path, dev_server, worker) -> None:
    data = yaml.safe_load((ROOT / "examples" / "docker-repl.yaml").read_text())
    data["name"] = f"docker-{uuid.uuid4().hex[:6]}"
    # One at a time: a sample whose task's box is still in use gets a fresh one (a miss).
    data["concurrency"] = 1
    spec = tmp_path / "docker.yaml"
    spec.write_text(yaml.safe_dump(data))
    out = tmp_path / "results.jsonl"
    code, stdout, stderr = await episodes(
        "run",
        str(spec),
        "--address",
        dev_server.address,
        "--task-queue",
        "episodes-test",
        "--out",
        str(out),
        timeout=300,
    )
    assert code == 0, stderr + stdout
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 4
    assert all(r["termination"] == "env_done" for r in rows), rows
    # State lives in the container's REPL across turns, the box has no network, and the
    # second sample of each task reused the first one's parked container.
    assert all(r["reward"] == 1.0 for r in rows), rows
    assert sorted(r["pool_hit"] for r in rows) == [False, False, True, True]
    assert "pool hits / misses" in stdout

    # Parked boxes belong to the worker; closing its pools removes them.
    mine = f"episodes.worker={worker.worker_id}"
    assert len(_containers(mine)) == 2
    await worker.pools.close()
    assert _containers(mine) == []


async def test_dead_local_workers_containers_are_reaped() -> None:
    from episodes.runtimes.docker import DockerRuntime
    from episodes.types.runtime import DockerConfig
    from workers.orphans import reap_orphan_containers

    dead = f"{socket.gethostname()}-999999-{uuid.uuid4().hex[:6]}"  # pid 999999: not running
    box = DockerRuntime(DockerConfig(), labels={"worker": dead, "session": "s"})
    await box.start()
    try:
        assert len(_containers(f"episodes.worker={dead}")) == 1
        assert reap_orphan_containers() >= 1
        assert _containers(f"episodes.worker={dead}") == []
    finally:
        await box.stop()
