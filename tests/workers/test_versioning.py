"""Worker Versioning on the dev server: a pinned session stays on the build that opened it."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import SetWorkerDeploymentCurrentVersionRequest
from temporalio.service import RPCError

from episodes.client import EpisodesClient
from tests.support.helpers import spec as make_spec
from tests.support.worker_procs import WorkerProc

pytestmark = pytest.mark.slow


async def set_current(client, deployment: str, build_id: str) -> None:  # type: ignore[no-untyped-def]
    """What a deploy does once the new build's workers poll (`temporal worker deployment
    set-current-version`); retried until the server has seen the version."""
    last = ""
    for _ in range(100):
        try:
            await client.workflow_service.set_worker_deployment_current_version(
                SetWorkerDeploymentCurrentVersionRequest(
                    namespace=client.namespace, deployment_name=deployment, build_id=build_id
                )
            )
            return
        except RPCError as e:
            last = e.message
            await asyncio.sleep(0.2)
    raise AssertionError(f"version {deployment}/{build_id} never became current: {last}")


async def identities(client, workflow_id: str) -> set[str]:  # type: ignore[no-untyped-def]
    out = set()
    async for ev in client.get_workflow_handle(workflow_id).fetch_history_events():
        if ev.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            out.add(ev.workflow_task_completed_event_attributes.identity)
        elif ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            out.add(ev.activity_task_started_event_attributes.identity)
    return out


async def test_pinned_session_stays_on_its_build_across_a_deploy(dev_server, client, tmp_path):
    queue = f"versioned-{uuid.uuid4().hex[:6]}"
    deployment = f"episodes-{uuid.uuid4().hex[:6]}"
    versioning = ("--deployment-name", deployment)
    a = WorkerProc(dev_server.address, queue, tmp_path / "a.log", *versioning, "--build-id", "a")
    b = None
    try:
        await set_current(client, deployment, "a")
        episodes = EpisodesClient(client, task_queue=queue)
        spec = make_spec(
            name=f"v-{uuid.uuid4().hex[:6]}",
            tasks=[{"id": "t0", "data": {"messages": ["1", "2", "3", "4"]}}],
        )
        old = await episodes.open_session(spec, spec.tasks[0], workflow_id=f"{spec.name}-old")
        await old.step("1")

        # Deploy build b: its worker polls, then it becomes current.
        b = WorkerProc(
            dev_server.address, queue, tmp_path / "b.log", *versioning, "--build-id", "b"
        )
        await set_current(client, deployment, "b")
        new = await episodes.run_episode(spec, spec.tasks[0], batch_id=f"{spec.name}-new")
        assert new.termination == "env_done"

        # The session opened on a keeps running there (its harness is in a's memory).
        await old.step("2")
        result = await old.close()
        assert result.turns == 2

        old_ids = {i.split("@")[0] for i in await identities(client, f"{spec.name}-old")}
        assert old_ids == {a.worker_id}, old_ids
        new_id = (await episodes.start_episode(spec, spec.tasks[0], batch_id=f"{spec.name}-new")).id
        new_ids = {i.split("@")[0] for i in await identities(client, new_id)}
        assert new_ids == {b.worker_id}, new_ids
    finally:
        a.stop()
        if b is not None:
            b.stop()
