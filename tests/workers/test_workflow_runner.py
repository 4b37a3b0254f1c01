"""The workflows run as plain code by default, in the SDK's sandbox on request.

Both ways run the same episode to the same result. The sandbox's own checks on the
workflow code are the replay tests' (tests/workflows/test_replay.py) and the
workflow-logic tests' (their workers keep the SDK's default, the sandbox).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid

from temporalio.worker import UnsandboxedWorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from episodes.client import EpisodesClient
from episodes.client.config import load_settings
from tests.support.helpers import spec
from workers.worker import EpisodeWorker, WorkerOptions


def test_the_sandbox_is_a_setting_off_by_default() -> None:
    assert load_settings(environ={}).workflow_sandbox is False
    assert load_settings(environ={"EPISODES_WORKFLOW_SANDBOX": "true"}).workflow_sandbox
    assert load_settings({"workflow_sandbox": True}, environ={}).workflow_sandbox


async def test_sandboxed_and_plain_workers_run_the_same_episode(client) -> None:
    results = {}
    for sandboxed in (False, True):
        queue = f"runner-{uuid.uuid4().hex[:6]}"
        w = EpisodeWorker(client, WorkerOptions(task_queue=queue, workflow_sandbox=sandboxed))
        runner = w._shared.config()["workflow_runner"]
        expected = SandboxedWorkflowRunner if sandboxed else UnsandboxedWorkflowRunner
        assert isinstance(runner, expected)
        run = asyncio.create_task(w.run())
        try:
            s = spec(name=f"runner-{sandboxed}-{uuid.uuid4().hex[:6]}")
            result = await EpisodesClient(client, task_queue=queue).run_episode(s, s.tasks[0])
        finally:
            w.request_stop()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(run, 30)
        results[sandboxed] = (result.termination, result.turns, result.reward)
    assert results[False] == results[True]
    assert results[False][0] == "env_done" and results[False][1] > 0
