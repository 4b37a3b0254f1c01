"""A worker SIGKILLed mid-way through a Harbor task (its oracle busy on the second step
of the multi-step task) with `on_worker_lost: restart`: the episode is restored on the
other worker (a fresh box; the recorded step replayed, its tests run again) and ends
scored. The second step waits for a file in its box (the test kills the first worker
while it waits, and creates the file in the restored box): nothing is timed."""

from __future__ import annotations

import contextlib
import shutil
import signal
import uuid
from pathlib import Path

import pytest

from episodes.types.spec import parse_spec
from tests.support.backends import docker as backend
from tests.support.chaos.helpers import (
    WorkerProc,
    containers_of,
    docker_api,
    results,
    start_all,
    wait_closed,
)
from tests.support.harbor import TASKS
from tests.support.harbor.images import busybox_reason
from tests.support.helpers import wait_until
from tests.workers.test_worker_kill import _progress

GO = "/tmp/episodes-test-go"

pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.docker, pytest.mark.timeout(300)]


async def test_sigkill_mid_harbor_task_restarts_and_ends_scored(
    chaos_server, chaos_client, tmp_path
):
    reason = backend.skip_reason() or busybox_reason()
    if reason:
        pytest.skip(reason)
    task = Path(shutil.copytree(TASKS / "multi-step", tmp_path / "multi-step"))
    # The second step's solution waits for this file in its box: the kill lands while
    # the oracle runs it on A; in B's box the test creates it.
    toml = (task / "task.toml").read_text()
    (task / "task.toml").write_text(toml + f'\n[solution]\nenv = {{ SLOW_STEP = "{GO}" }}\n')
    queue = f"harbor-kill-{uuid.uuid4().hex[:6]}"
    spec = parse_spec(
        {
            "name": f"hk-{uuid.uuid4().hex[:6]}",
            "harbor": str(task),
            "harness": "oracle",
            "on_worker_lost": "restart",
            "worker_lost_timeout_s": 3.0,
        }
    )
    api, why = docker_api()
    assert api is not None, why
    a = WorkerProc(chaos_server.address, queue, tmp_path / "a.log").start()
    b = WorkerProc(chaos_server.address, queue, tmp_path / "b.log")
    try:
        await a.ready()
        [wid] = await start_all(chaos_client, queue, spec)

        async def on_a(turns: int) -> bool:
            p = await _progress(chaos_client, wid)
            return p is not None and p.turns_done >= turns and p.status == "running"

        # Running on A (its box provisioned there): B may start, it takes nothing of it.
        assert await wait_until(lambda: on_a(0), timeout=180), a.text()[-3000:]
        await b.start().ready()
        assert await wait_until(lambda: on_a(1), timeout=180), a.text()[-3000:]
        a.signal(signal.SIGKILL)
        assert a.wait(10) == -signal.SIGKILL

        def go_in_b() -> bool:
            """The file the second step waits for, created in B's box once it runs."""
            for cid in containers_of(api, b.worker_id):
                with contextlib.suppress(Exception):
                    run = api.exec_create(cid.lstrip("/"), ["touch", GO])
                    api.exec_start(run["Id"])
                    if api.exec_inspect(run["Id"])["ExitCode"] == 0:
                        return True
            return False

        assert await wait_until(go_in_b, timeout=180, interval=0.2), b.text()[-3000:]
        closed = await wait_closed(chaos_client, [wid], timeout_s=200)
        assert wid in closed, b.text()[-3000:]
        result = (await results(chaos_client, [wid]))[wid]
        assert (result.termination, result.reward, result.turns) == ("env_done", 1.0, 2), result
        assert result.restarts == 1 and result.turns_replayed == 1, result
        assert result.score_details["steps_run"] == 2
    finally:
        a.kill()
        b.kill()
        api, _ = docker_api()
        if api is not None:  # the killed worker's box (no one else removes it here)
            for cid in containers_of(api, a.worker_id):
                api.remove_container(cid, force=True, v=True)
