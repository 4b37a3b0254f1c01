"""`episodes fork` as a user runs it (a real subprocess, a real dev server and worker):
a branch whose workflow fails ends the command with one line, not a traceback."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from temporalio.service import RPCError

from episodes.client import EpisodesClient
from episodes.types.results import EpisodeResult
from tests.episodes.cli.test_cli import episodes as cli
from tests.support.helpers import spec

pytestmark = pytest.mark.timeout(300)

QUEUE = "episodes-test"


async def _terminate_when_started(client, workflow_id: str) -> None:  # type: ignore[no-untyped-def]
    """Terminate the workflow as soon as it exists (nothing polls its queue: it waits)."""
    handle = client.get_workflow_handle(workflow_id)
    while True:
        try:
            await handle.terminate(reason="the test fails this branch")
            return
        except RPCError:  # not started yet
            await asyncio.sleep(0.2)


async def test_a_failed_branch_is_one_line_and_the_same_command_runs_it_again(
    client, worker, dev_server, tmp_path
) -> None:
    ec = EpisodesClient(client, task_queue=QUEUE)
    s = spec(name=f"forkcli-{uuid.uuid4().hex[:6]}")
    parent = await ec.run_episode(s, s.tasks[0])
    assert (parent.termination, parent.turns) == ("env_done", 3), parent.error
    branch = f"{parent.workflow_id}.f1.0"
    out = tmp_path / "fork.jsonl"

    def fork(queue: str):  # type: ignore[no-untyped-def]
        return cli(
            *("fork", parent.workflow_id, "--at-turn", "1", "--samples", "1", "--out", str(out)),
            *("--address", dev_server.address, "--task-queue", queue),
            timeout=180,
        )

    # No worker polls this queue: the branch waits there until the test terminates it.
    idle = f"nobody-{uuid.uuid4().hex[:6]}"
    (code, stdout, stderr), _ = await asyncio.gather(
        fork(idle), _terminate_when_started(client, branch)
    )
    assert code != 0
    assert "Traceback" not in stderr + stdout, stderr
    [line] = [ln for ln in stderr.splitlines() if ln.strip()]
    assert line.startswith("error:") and branch in line
    assert "the same command" in line and f"episodes show {branch}" in line
    [row] = [EpisodeResult.model_validate_json(r) for r in out.read_text().splitlines()]
    assert (row.workflow_id, row.termination) == (branch, "workflow_failed")

    # As the line says: the same command (on a queue a worker polls) runs it anew ...
    code, stdout, stderr = await fork(QUEUE)
    assert code == 0, stderr
    [row] = [EpisodeResult.model_validate_json(r) for r in out.read_text().splitlines()]
    assert (row.workflow_id, row.termination, row.turns_replayed) == (branch, "env_done", 1)
    # ... and once more attaches to the branch that completed, not a traceback.
    code, stdout, stderr = await fork(QUEUE)
    assert code == 0, stderr
    [again] = [EpisodeResult.model_validate_json(r) for r in out.read_text().splitlines()]
    assert again == row
