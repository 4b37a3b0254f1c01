"""Harbor tasks end to end on the real Docker engine: the test dataset
(tests/support/harbor/tasks: an image with Python, one without, a multi-step task, tests
that read the agent's files) scored 1.0 by the oracle and 0.0 by nop through `episodes
run`, one harness process across a multi-step task's steps, a follow-up turn after failed
tests."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import pytest
import yaml

from episodes.client.core import EpisodesClient
from episodes.client.histories.transcript import recorded_turns
from episodes.session.live import LiveSession
from episodes.types.spec import load_harbor_dir, parse_spec
from tests.episodes.cli.test_cli import episodes
from tests.support.backends import docker as backend
from tests.support.harbor import TASKS
from tests.support.harbor.images import busybox_reason

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(600)]
QUEUE = "episodes-test"


@pytest.fixture(scope="module", autouse=True)
def _engine() -> None:
    reason = backend.skip_reason() or busybox_reason()
    if reason:
        pytest.skip(reason)


async def _run(tmp_path: Path, dev_server, **spec) -> list[dict]:
    data = {"name": f"tb-{uuid.uuid4().hex[:6]}", "harbor": str(TASKS), **spec}
    path = tmp_path / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data))
    out = tmp_path / f"{data['name']}.jsonl"
    _code, stdout, stderr = await episodes(
        "run",
        str(path),
        "--address",
        dev_server.address,
        "--task-queue",
        QUEUE,
        "--out",
        str(out),
        timeout=540,
    )
    assert out.exists() and out.read_text(), stderr + stdout
    return sorted(
        (json.loads(line) for line in out.read_text().splitlines()), key=lambda r: r["task_id"]
    )


def _why(results: list[dict]) -> str:
    """What went wrong, short enough for pytest to print whole."""
    return "\n".join(f"{r['task_id']}: {r['termination']}: {r.get('error')}" for r in results)


async def test_oracle_scores_one_and_nop_zero_through_episodes_run(tmp_path, dev_server, worker):
    # The exact spec (with the dataset's path).
    oracle = await _run(tmp_path, dev_server, harness="oracle", samples=1, concurrency=3)
    assert [(r["task_id"], r["termination"], r["reward"]) for r in oracle] == [
        ("busybox-sum", "env_done", 1.0),
        ("hello-file", "env_done", 1.0),
        ("multi-step", "env_done", 1.0),
    ], _why(oracle)
    by_id = {r["task_id"]: r for r in oracle}
    # The image without Python: its verifier's reward.json, the rest of it in the details.
    assert by_id["busybox-sum"]["score_details"]["rewards"] == {
        "reward": 1,
        "correct": True,
        "answer": "42",
    }
    assert by_id["multi-step"]["turns"] == 2
    assert by_id["multi-step"]["score_details"]["steps_run"] == 2

    nop = await _run(tmp_path, dev_server, harness="nop", concurrency=3)
    assert [(r["task_id"], r["termination"], r["reward"]) for r in nop] == [
        ("busybox-sum", "env_done", 0.0),
        ("hello-file", "env_done", 0.0),
        ("multi-step", "env_done", 0.0),
    ], _why(nop)
    # The first step is below its min_reward: the episode ends there.
    assert {r["task_id"]: r["turns"] for r in nop}["multi-step"] == 1


async def test_multi_step_task_keeps_one_harness_process_across_its_steps():
    spec = parse_spec({"name": "ms", "harbor": str(TASKS / "multi-step"), "harness": "oracle"})
    [task] = load_harbor_dir(TASKS / "multi-step")
    session = LiveSession(spec, task, 0, f"ms-{uuid.uuid4().hex[:6]}")
    try:
        first = await session.open()
        assert first.strip() == "Write the line `one` to /app/state."
        pid = session.harness.pid
        one = await session.turn(0)
        two = await session.turn(1)
        assert not one.observation.done and one.observation.reward == 1.0
        assert one.observation.message.strip() == "Append the line `two` to /app/state."
        assert two.observation.done and two.observation.reward == 1.0
        assert one.record.reply["pid"] == two.record.reply["pid"]
        assert session.harness.pid == pid and session.harness.alive
        score = await session.score("env_done")
        assert score.reward == 1.0 and score.details["strategy"] == "mean"
    finally:
        await session.close()


# Does nothing on its first turn; on a follow-up, what the task asked (in the box, with
# the runtime bundle's Python: `{episodes}` is resolved in the -c source too).
SECOND_TRY = """
import subprocess, sys
sys.path.insert(0, "{episodes}")
from episodes.harness import sdk
def handle(turn, message, emit):
    if turn == 0:
        return "done (not really)"
    subprocess.run(["sh", "-c", "echo 'Hello, world!' > /app/hello.txt"], check=True)
    return "fixed"
sdk.serve(handle)
"""


async def test_a_follow_up_turn_after_failed_tests_is_recorded(tmp_path, client, worker):
    task_dir = Path(shutil.copytree(TASKS / "hello-file", tmp_path / "hello-file"))
    spec = parse_spec(
        {
            "name": f"retry-{uuid.uuid4().hex[:6]}",
            "harbor": str(task_dir),
            "harness": {"command": ["{python}", "-I", "-c", SECOND_TRY]},
            "harbor_retries": 1,
        }
    )
    [task] = spec.load_tasks()
    ec = EpisodesClient(client, task_queue=QUEUE)
    result = await ec.run_episode(spec, task)
    assert (result.termination, result.turns, result.reward) == ("env_done", 2, 1.0), result
    assert result.score_details["follow_ups"] == 1
    first, second = result.score_details["verifications"]
    assert (first["reward"], second["reward"]) == (0.0, 1.0)
    turns = await recorded_turns(client, result.workflow_id, 2)
    assert turns[1].message.startswith("The task's tests failed (reward 0.0)")
    assert "hello.txt is missing or wrong" in turns[1].message
    assert turns[1].reply == "fixed"


async def test_harbor_check_names_each_problem(tmp_path):
    bad = Path(shutil.copytree(TASKS / "hello-file", tmp_path / "tasks" / "wrong-solution"))
    (bad / "solution" / "solve.sh").write_text("#!/bin/sh\necho 'Goodbye' > /app/hello.txt\n")
    broken = Path(shutil.copytree(TASKS / "hello-file", tmp_path / "tasks" / "bad-schema"))
    (broken / "task.toml").write_text("[environment]\nskills_dir = '/skills'\n")
    code, out, err = await episodes("harbor", "check", str(tmp_path / "tasks"), timeout=300)
    assert code == 1, out + err
    assert out.splitlines() == [
        "bad-schema: task.toml: environment.skills_dir: not supported by episodes "
        "(remove it, or run the task elsewhere)",
        "wrong-solution: oracle scored 0.0, want 1.0 (env_done)",
    ], out
    ok, out, err = await episodes("harbor", "check", str(TASKS / "busybox-sum"), timeout=300)
    assert (ok, out) == (0, "busybox-sum: ok\n"), out + err
