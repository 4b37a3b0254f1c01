"""SIGKILL the worker under an OpenEnv session (`on_worker_lost: restart`): OpenEnv's
client's next step is still answered, only later (a new session on the other worker
replays the recorded turns first), and each of its turns reaches a harness once."""

from __future__ import annotations

import signal
import time
import uuid

import pytest

pytest.importorskip("openenv")

from openenv.core import GenericEnvClient

from tests.episodes.integrations.openenv.sessions import (
    MESSAGES,
    by_harness,
    logging_spec,
    openenv_server,
    progress,
)
from tests.support.chaos.helpers import WorkerProc

pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.timeout(300)]


async def test_sigkill_of_the_worker_mid_session_costs_the_client_only_latency(
    chaos_server, chaos_client, tmp_path
):
    queue = f"openenv-kill-{uuid.uuid4().hex[:6]}"
    seen = tmp_path / "seen"
    seen.mkdir()
    spec = logging_spec(seen, on_worker_lost="restart", worker_lost_timeout_s=3)
    a = WorkerProc(chaos_server.address, queue, tmp_path / "a.log").start()
    b = WorkerProc(chaos_server.address, queue, tmp_path / "b.log")
    try:
        await a.ready()  # only A polls: the session opens there
        async with openenv_server(chaos_client, queue, spec) as url:
            async with GenericEnvClient(url, message_timeout_s=180) as env:
                obs = (await env.reset(task_id="p")).observation
                workflow_id = obs["workflow_id"]
                for i in (0, 1):
                    obs = (await env.step({"message": obs["message"]})).observation
                    assert (obs["turn"], obs["reply"]) == (i, MESSAGES[i])
                held = (await progress(chaos_client, workflow_id)).session
                assert held is not None and held.worker_id == a.worker_id

                await b.start().ready()
                a.signal(signal.SIGKILL)
                assert a.wait(10) == -signal.SIGKILL
                killed = time.monotonic()
                result = await env.step({"message": obs["message"]})
                waited = time.monotonic() - killed
                obs = result.observation
                assert (obs["turn"], obs["reply"], obs["error"], result.done) == (
                    2,
                    "p:2",
                    None,
                    False,
                )
                last = await env.step({"message": obs["message"]})
                assert last.done and last.reward == 1.0
                assert last.observation["termination"] == "env_done"
        print(f"\nopenenv kill: step 2 answered {waited:.1f} s after the kill")

        episode = await chaos_client.get_workflow_handle(workflow_id).result()
        assert (episode["turns"], episode["restarts"], episode["turns_replayed"]) == (4, 1, 2)
        # A's harness got turns 0-1 and died with A; B's got them replayed, then 2-3.
        assert by_harness(seen) == [MESSAGES[:2], MESSAGES]
    finally:
        a.kill()
        b.kill()
