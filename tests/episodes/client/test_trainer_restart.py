"""A trainer that restarts (issue 41 §3): its acknowledgements are kept on the server,
so a trainer SIGKILLed and run again under the same batch id gets every group it did
not acknowledge once, never one it did, and no episode runs twice.

The trainer is a real subprocess (`restart_trainer.py`, the blocking client) killed
with SIGKILL at chosen points: after its 5th acknowledgement, on receiving its 4th
group (before acknowledging it), after its 9th; the fourth run finishes the batch.
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest
import yaml
from temporalio.client import WorkflowExecutionStatus

from episodes import contract
from episodes.client.group.receipts import read_receipts, receipts_status
from tests.episodes.cli.test_cli import episodes as cli
from tests.support.helpers import spec

pytestmark = pytest.mark.timeout(900)

QUEUE = "episodes-test"
GROUPS, SAMPLES = 32, 2
TRAINER = Path(__file__).with_name("restart_trainer.py")
KILLS = ["ack:5", "recv:4", "ack:9"]


async def _trainer(address: str, spec_path: Path, batch: str, log: Path, die: str | None) -> int:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    extra = ["--die", die] if die else []
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(TRAINER),
        address,
        QUEUE,
        str(spec_path),
        batch,
        str(log),
        *extra,
        env=env,
    )
    return await asyncio.wait_for(proc.wait(), 600)


async def test_a_killed_trainer_resumes_from_the_servers_receipts(
    client, worker, dev_server, tmp_path
) -> None:
    batch = f"restart-{uuid.uuid4().hex[:6]}"
    tasks = [{"id": f"t{i}", "data": {"messages": ["x"], "expected": ["x"]}} for i in range(GROUPS)]
    data = spec(name=batch, tasks=tasks, samples=SAMPLES).model_dump(mode="json", exclude_none=True)
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(data))
    log = tmp_path / "trainer.log"

    for die in [*KILLS, None]:
        code = await _trainer(dev_server.address, spec_path, batch, log, die)
        assert code == (-9 if die else 0), (die, code)
        if die == "ack:5":  # between runs, the server tells how far the trainer got
            addr = ["--address", dev_server.address, "--task-queue", QUEUE]
            code, out, err = await cli("batch", "status", batch, *addr)
            assert code == 0, err
            assert f"batch {batch}: 5 of {GROUPS} groups acknowledged, 27 outstanding" in out

    lines = [line.split(" ", 1) for line in log.read_text().splitlines()]
    acks = [g for kind, g in lines if kind == "ack"]
    received = Counter(g for kind, g in lines if kind == "recv")
    every = {contract.group_id(batch, t["id"]) for t in tasks}
    assert len(acks) == GROUPS and set(acks) == every  # all 32, none acknowledged twice
    # The one group received and not acknowledged (killed at recv:4) came again, once.
    assert sorted(received.values()) == [1] * (GROUPS - 1) + [2]
    receipts = await read_receipts(client, batch)
    assert receipts.closed and receipts.acks == acks  # the server's record, in order

    # No episode started twice: one execution per id, no fresh attempt (`.r<n>`).
    query = f'EpisodeBatch = "{batch}"'

    async def executions() -> list:
        return [wf async for wf in client.list_workflows(query)]

    runs: list = []
    for _ in range(120):  # visibility trails the histories: wait until it has them all
        runs = await executions()
        if len(runs) >= GROUPS * SAMPLES and all(
            r.status == WorkflowExecutionStatus.COMPLETED for r in runs
        ):
            break
        await asyncio.sleep(1)
    ids = Counter(r.id for r in runs)
    want = {contract.episode_id(batch, t["id"], s) for t in tasks for s in range(SAMPLES)}
    assert set(ids) == want and set(ids.values()) == {1}
    assert {r.status for r in runs} == {WorkflowExecutionStatus.COMPLETED}

    status = await receipts_status(client, batch)
    assert (status.acknowledged, status.outstanding, status.running, status.twice) == (
        GROUPS,
        0,
        0,
        0,
    )


async def test_group_workflows_take_acknowledgements_too(client, worker) -> None:
    """`execution="group"` with the async client: a group acknowledged is not handed
    out again when the batch runs again; the other is, attached to its finished
    group workflow (not run twice)."""
    from episodes.client import EpisodesClient

    batch = f"ackgx-{uuid.uuid4().hex[:6]}"
    tasks = [{"id": t, "data": {"messages": ["x"], "expected": ["x"]}} for t in ("a", "b")]
    s = spec(name=batch, tasks=tasks, samples=2, execution="group")
    ec = EpisodesClient(client, task_queue=QUEUE)
    first = [g async for g in ec.run_batch(s, groups=True)]
    assert sorted(g.task_id for g in first) == ["a", "b"]
    await ec.ack(next(g for g in first if g.task_id == "a"))
    again = [g async for g in ec.run_batch(s, groups=True)]
    assert [g.task_id for g in again] == ["b"]
    assert [r.workflow_id for r in again[0].results] == [f"{batch}.b.g.s{i}" for i in (0, 1)]
    status = await ec.batch_status(batch)
    assert (status.acknowledged, status.outstanding, status.running) == (1, 1, 0)
