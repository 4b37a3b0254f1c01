"""Docker-backed episodes through Temporal and `episodes run`, against a real engine."""

from __future__ import annotations

import json
import socket
import uuid

import pytest
import yaml

from tests.conftest import ROOT
from tests.episodes.cli.test_cli import episodes
from tests.support.backends import docker as backend

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
    from episodes.runtimes.docker.runtime import DockerRuntime
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


async def test_a_reused_pid_does_not_hide_a_dead_workers_containers() -> None:
    """A restarted compose container runs its new worker under the old one's pid (often
    1): pid alone says the old worker lives and its containers stay forever. The
    worker's start time, labelled on each container, tells the two apart."""
    import subprocess
    import sys

    import psutil

    from episodes.runtimes.docker.runtime import DockerRuntime
    from episodes.types.runtime import DockerConfig
    from workers.orphans import reap_orphan_containers

    host, tag = socket.gethostname(), uuid.uuid4().hex[:6]
    # A live process standing in for "whatever now runs under the dead worker's pid".
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        now_started = psutil.Process(other.pid).create_time()
        reused = f"{host}-{other.pid}-{tag}a"  # its writer started an hour before that pid
        alive = f"{host}-{other.pid}-{tag}b"  # the process under the pid is its writer
        boxes = [
            DockerRuntime(
                DockerConfig(),
                labels={"worker": reused, "worker_started": f"{now_started - 3600:.3f}"},
            ),
            DockerRuntime(
                DockerConfig(), labels={"worker": alive, "worker_started": f"{now_started:.3f}"}
            ),
        ]
        for box in boxes:
            await box.start()
        try:
            reap_orphan_containers()
            assert _containers(f"episodes.worker={reused}") == []
            assert len(_containers(f"episodes.worker={alive}")) == 1
        finally:
            for box in boxes:
                await box.stop()
    finally:
        other.kill()
        other.wait()


def test_a_container_is_labelled_with_its_workers_start_time() -> None:
    import psutil

    from episodes.runtimes.docker.runtime import DockerRuntime

    box = DockerRuntime(labels={"worker": "w"})
    started = float(box.labels["episodes.worker_started"])
    assert abs(started - psutil.Process().create_time()) < 1.0
