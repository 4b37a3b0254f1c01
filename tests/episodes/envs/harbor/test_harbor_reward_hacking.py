"""A leftover agent process cannot write the verifier's reward (issue 40 §6), on the
real Docker engine: the agent's turn leaves a background loop that keeps writing 1 to
/logs/verifier/reward.txt, and the task's test.sh writes 0 (then lingers, so that the
loop has every chance to overwrite it before the reward is read). The reward must be
0: the env sweeps every process the agent left outside its live harness before the
tests run (docs/harbor.md, "Verification"). The harness process itself lives on, as a
multi-step task needs (test_harbor_docker.py checks one harness across steps)."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest

from episodes.session.live import LiveSession
from episodes.types.spec import parse_spec
from tests.support.backends import docker as backend
from tests.support.harbor import TASKS

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module", autouse=True)
def _engine() -> None:
    reason = backend.skip_reason()
    if reason:
        pytest.skip(reason)


# Its only turn: start the writer in the background (the shell that started it exits,
# so it is nobody's child but the box's init), wait until it has written, answer.
HACKER = """
import os, subprocess, sys, time
sys.path.insert(0, "{episodes}")
from episodes.harness import sdk
LOOP = "while :; do echo 1 > /logs/verifier/reward.txt; sleep 0.05; done"
def handle(turn, message, emit):
    subprocess.run(["sh", "-c", LOOP + " >/dev/null 2>&1 &"], check=True)
    while not os.path.exists("/logs/verifier/reward.txt"):
        time.sleep(0.05)
    return "done"
sdk.serve(handle)
"""

TEST_SH = """#!/bin/sh
echo 0 > /logs/verifier/reward.txt
sleep 0.5
echo "wrote 0"
"""


async def test_a_leftover_agent_process_cannot_rewrite_the_reward(tmp_path: Path) -> None:
    task_dir = Path(shutil.copytree(TASKS / "hello-file", tmp_path / "reward-hack"))
    (task_dir / "tests" / "test.sh").write_text(TEST_SH)
    spec = parse_spec(
        {
            "name": f"hack-{uuid.uuid4().hex[:6]}",
            "harbor": str(task_dir),
            "harness": {"command": ["{python}", "-I", "-c", HACKER]},
        }
    )
    [task] = spec.load_tasks()
    session = LiveSession(spec, task, 0, f"hack-{uuid.uuid4().hex[:6]}")
    try:
        await session.open()
        result = await session.turn(0)
        # Before the fix: 1.0, or env_error when the read met the file mid-write.
        assert result.termination == "env_done", session.env.results
        assert result.observation.done
        assert result.observation.reward == 0.0, session.env.results
        assert session.harness.alive  # the live harness was spared
        # Nothing of the agent's is left writing: the reward stays as the tests left it.
        raw = await session.env.box.read_file("/logs/verifier/reward.txt")
        assert raw.strip() == b"0"
    finally:
        await session.close()
