"""Harbor task content is untrusted, end to end on the real Docker engine: a task whose
image has no `tar` and whose tests/ and solution/ hold links to /proc/self/environ
passes `episodes harbor check` (run as the user runs it, with a canary secret in its
environment) only if the links reach the box as links; a verifier's `nan` reward ends
the episode `env_error` naming the file and the value."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from episodes.local import run_episode_local
from episodes.types.spec import load_harbor_dir, parse_spec
from tests.conftest import ROOT
from tests.support.backends import docker as backend
from tests.support.harbor import TASKS
from tests.support.harbor.images import busybox_reason

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(600)]
CANARY = "sk-canary-" + uuid.uuid4().hex


@pytest.fixture(scope="module", autouse=True)
def _engine() -> None:
    reason = backend.skip_reason() or busybox_reason()
    if reason:
        pytest.skip(reason)


SOLVE = """#!/bin/sh
if [ -L /solution/notes.txt ] && [ "$(readlink /solution/notes.txt)" = /proc/self/environ ]; then
  echo linked > /app/solved
fi
"""
TEST = """#!/bin/sh
ls -la /tests /solution 2>&1
if [ -L /tests/notes.txt ] && [ -f /app/solved ]; then r=1; else r=0; fi
echo $r > /logs/verifier/reward.txt
"""


def _links_task(root: Path) -> Path:
    task = Path(shutil.copytree(TASKS / "busybox-sum", root / "links-no-tar"))
    (task / "environment" / "Dockerfile").write_text(
        # Debian's (dash runs what is on the PATH; busybox's sh would run its own tar).
        "FROM episodes-harness:latest\nUSER root\nRUN rm /usr/bin/tar && mkdir -p /app\n"
        "WORKDIR /app\n"
    )
    (task / "solution" / "solve.sh").write_text(SOLVE)
    (task / "tests" / "test.sh").write_text(TEST)
    for part in ("solution", "tests"):
        (task / part / "notes.txt").symlink_to("/proc/self/environ")
    return task


def test_harbor_check_copies_links_as_links_into_a_box_without_tar(tmp_path: Path) -> None:
    task = _links_task(tmp_path / "tasks")
    done = subprocess.run(
        [sys.executable, "-m", "episodes.cli.main", "harbor", "check", str(task)],
        capture_output=True,
        text=True,
        timeout=500,
        cwd=ROOT,
        env={**os.environ, "CANARY_KEY": CANARY, "OPENAI_API_KEY": CANARY},
    )
    assert CANARY not in done.stdout + done.stderr
    assert (done.returncode, done.stdout) == (0, "links-no-tar: ok\n"), done.stdout + done.stderr


async def test_a_nan_reward_ends_env_error_naming_the_file_and_value(tmp_path: Path) -> None:
    task = Path(shutil.copytree(TASKS / "busybox-sum", tmp_path / "nan-reward"))
    (task / "tests" / "test.sh").write_text("#!/bin/sh\necho nan > /logs/verifier/reward.txt\n")
    spec = parse_spec({"name": "nan-reward", "harbor": str(task), "harness": "oracle"})
    [one] = load_harbor_dir(task)
    result = await run_episode_local(spec, one)
    assert result.termination == "env_error", result
    assert result.reward is None
    assert "/logs/verifier/reward.txt is not a finite number: 'nan'" in (result.error or "")
