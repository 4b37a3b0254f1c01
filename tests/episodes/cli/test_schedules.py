"""`episodes schedule ...` as a user runs it, against the real dev server and worker."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import yaml

from episodes.types.io import BatchResult
from tests.episodes.cli.test_cli import episodes
from tests.support.helpers import wait_until

QUEUE = "episodes-test"
NEVER_SOON = "0 3 1 1 *"  # 03:00 on January 1st: never fires during a test run


def write_spec(tmp_path: Path, name: str) -> Path:
    data = {
        "name": name,
        "env": "script",
        "tasks": [
            {"id": "a", "data": {"messages": ["x", "y"], "expected": ["x", "y"]}},
            {"id": "b", "data": {"messages": ["z"], "expected": ["nope"]}},
        ],
        "samples": 2,
        "harness": {"command": "{python} -m episodes.harness.reference.echo"},
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


async def test_create_trigger_find_pause_delete(tmp_path, dev_server, client, worker) -> None:
    name = f"nightly-{uuid.uuid4().hex[:6]}"
    spec = write_spec(tmp_path, f"sched-{name}")
    addr = ["--address", dev_server.address]

    code, out, err = await episodes(
        "schedule", "create", name, str(spec), "--cron", NEVER_SOON, "--task-queue", QUEUE, *addr
    )
    assert code == 0, err + out
    code, out, err = await episodes(
        "schedule", "create", name, str(spec), "--cron", NEVER_SOON, *addr
    )
    assert code == 2 and "already exists" in err and "Traceback" not in err

    # Listing goes through visibility, which lags a moment behind the create.
    async def listed() -> bool:
        code, out, _ = await episodes("schedule", "list", *addr)
        return code == 0 and name in out

    assert await wait_until(listed, timeout=30, interval=0.5)

    code, out, err = await episodes("schedule", "describe", name, *addr)
    assert code == 0, err
    assert f"cron {NEVER_SOON}" in out and "skip" in out and "active" in out
    assert f"sched-{name}" in out and re.search(r"episodes per run\s*│\s*4\b", out)

    code, out, err = await episodes("schedule", "trigger", name, *addr)
    assert code == 0, err + out

    # The triggered batch and its episodes are found by the schedule's name.
    batch_q = f"EpisodeSchedule = '{name}' AND WorkflowType = 'EvalBatchWorkflow'"
    episode_q = f"EpisodeSchedule = '{name}' AND WorkflowType = 'EpisodeWorkflow'"

    async def finished() -> bool:
        done = await client.count_workflows(batch_q + " AND ExecutionStatus = 'Completed'")
        return done.count == 1

    assert await wait_until(finished, timeout=90, interval=0.5)
    [batch] = [wf async for wf in client.list_workflows(batch_q)]
    assert batch.id.startswith(f"schedule.{name}-")
    result = await client.get_workflow_handle(batch.id, result_type=BatchResult).result()
    assert result.schedule == name
    assert result.batch == batch.id  # each scheduled run is its own batch
    assert result.metrics.count == 4
    assert result.metrics.mean_reward == 0.5  # a: 1.0 twice, b: 0.0 twice
    assert result.metrics.pass_at_k == {1: 0.5, 2: 0.5}

    async def episodes_found() -> bool:
        return (await client.count_workflows(episode_q)).count == 4

    assert await wait_until(episodes_found, timeout=30, interval=0.25)
    ids = sorted([wf.id async for wf in client.list_workflows(episode_q)])
    assert ids == sorted(f"{batch.id}.{t}.s{s}" for t in "ab" for s in (0, 1))

    code, out, err = await episodes("schedule", "describe", name, *addr)
    assert code == 0 and batch.id in out, err + out
    # A scheduled run keeps its manifest (its workflow's memo): compare finds it there.
    code, out, err = await episodes("compare", batch.id, batch.id, "--json", *addr)
    assert code == 0, err + out
    verdict = json.loads(out)
    assert verdict["manifests"]["a"]["runtime"] == "subprocess" and verdict["warnings"] == []
    assert verdict["difference"] == 0.0 and verdict["p_value"] == 1.0

    code, out, err = await episodes("schedule", "pause", name, "--note", "maintenance", *addr)
    assert code == 0, err
    code, out, _ = await episodes("schedule", "describe", name, *addr)
    assert "paused (maintenance)" in out
    code, out, err = await episodes("schedule", "unpause", name, *addr)
    assert code == 0, err
    code, out, _ = await episodes("schedule", "describe", name, *addr)
    assert "active (unpaused)" in out

    code, out, err = await episodes("schedule", "delete", name, *addr)
    assert code == 0, err
    code, out, err = await episodes("schedule", "describe", name, *addr)
    assert code == 2 and f"no schedule named '{name}'" in err
    # The runs it started outlive it.
    assert (await client.count_workflows(episode_q)).count == 4


async def test_every_overlap_and_clear_errors(tmp_path, dev_server, client, worker) -> None:
    name = f"often-{uuid.uuid4().hex[:6]}"
    spec = write_spec(tmp_path, f"sched-{name}")
    addr = ["--address", dev_server.address]
    for bad, message in [
        (["--cron", NEVER_SOON, "--every", "6h"], "exactly one of"),
        ([], "exactly one of"),
        (["--every", "6 hours"], "not a duration"),
        (["--every", "6h", "--overlap", "sometimes"], "choose one of"),
        (["--cron", "not a cron"], "Invalid schedule spec"),
    ]:
        code, out, err = await episodes("schedule", "create", name, str(spec), *bad, *addr)
        assert code == 2, (bad, out, err)
        assert message in err.replace("\n", " ") and "Traceback" not in err, (bad, err)
    code, _, err = await episodes(
        "schedule", "create", name, str(tmp_path / "missing.yaml"), "--every", "6h", *addr
    )
    assert code == 2 and "spec file not found" in err

    code, out, err = await episodes(
        "schedule", "create", name, str(spec), "--every", "6h", "--overlap", "allow-all", *addr
    )
    assert code == 0, err + out
    code, out, err = await episodes("schedule", "describe", name, *addr)
    assert code == 0, err
    assert "every 6h" in out and "allow-all" in out and "next" in out
    code, out, err = await episodes("schedule", "trigger", name, "--overlap", "never", *addr)
    assert code == 2 and "choose one of" in err
    code, out, err = await episodes("schedule", "delete", name, *addr)
    assert code == 0, err
    code, out, err = await episodes("schedule", "pause", name, *addr)
    assert code == 2 and "no schedule named" in err
