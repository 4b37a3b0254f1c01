"""docs/tutorial.md, as a newcomer follows it: its commands, run from a copy of
examples/tutorial/ in a folder of its own (no address: `episodes run` brings up this
folder's dev server under .episodes/, and `episodes show` / `export` read it there).

The page shows the tutorial's files whole; the first test keeps the two in step.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from episodes.client.devserver import free_port, port_open
from tests.conftest import ROOT
from tests.support.worker_procs import cli_env

TUTORIAL = ROOT / "examples" / "tutorial"
PAGE = ROOT / "docs" / "tutorial.md"
WIDE = {"COLUMNS": "400"}  # rich wraps at 80 columns off a terminal


def test_the_page_shows_each_file_as_it_is() -> None:
    page = PAGE.read_text()
    for name in ("running_total.py", "harness.py", "harness.mjs", "spec.yaml"):
        assert (TUTORIAL / name).read_text().rstrip("\n") in page, name
    model = (TUTORIAL / "spec-model.yaml").read_text()
    assert model.split("model:\n", 1)[1].rstrip("\n") in page


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The user's own copy of examples/tutorial/, shared by the runs below (one dev
    server's data, as in the page)."""
    where = tmp_path_factory.mktemp("first-env") / "first-env"
    shutil.copytree(TUTORIAL, where)
    return where


def episodes(cwd: Path, *args: str, timeout: float = 240) -> str:
    """`episodes ARGS` in `cwd`, as a user types it; its output, or the test fails with it."""
    proc = subprocess.run(
        [sys.executable, "-m", "episodes.cli.main", *args],
        cwd=cwd,
        env=cli_env(**WIDE),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, f"episodes {' '.join(args)}: {proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


def summary_row(out: str, name: str) -> str:
    return next(line for line in out.splitlines() if f" {name} " in line)


@pytest.mark.slow
def test_the_python_harness_runs_and_its_episode_shows(folder: Path) -> None:
    out = episodes(folder, "run", "spec.yaml")
    assert "tutorial: 4 episodes" in out
    assert "1.000 (over 4)" in summary_row(out, "mean reward")
    shown = episodes(folder, "show", "tutorial.negative.s0")
    assert '"thinking": "What is 10 + -20?"' in shown
    assert "env_done after 4 turns, reward 1.0" in shown


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("node") is None, reason="the Node.js harness needs `node` on PATH")
def test_the_node_harness_runs_and_its_episode_shows(folder: Path) -> None:
    out = episodes(folder, "run", "spec-node.yaml")
    assert "tutorial-node: 4 episodes" in out
    assert "1.000 (over 4)" in summary_row(out, "mean reward")
    shown = episodes(folder, "show", "tutorial-node.small.s1")
    assert "total: 12" in shown
    assert "env_done after 3 turns, reward 1.0" in shown


@pytest.mark.slow
def test_the_model_harness_exports_samples(folder: Path) -> None:
    # The page's stand-in model, on a free port rather than 8765 (this machine is shared).
    port = free_port()
    spec = folder / "spec-model.yaml"
    spec.write_text(spec.read_text().replace("127.0.0.1:8765", f"127.0.0.1:{port}"))
    model = subprocess.Popen(
        [sys.executable, "-m", "episodes.model.scripted", "--policy", "echo", "--port", str(port)],
        env={**os.environ},
        stdout=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while not port_open("127.0.0.1", port):
            assert time.monotonic() < deadline and model.poll() is None, "no scripted model"
            time.sleep(0.1)
        out = episodes(folder, "run", "spec-model.yaml")
        assert "tutorial-model: 4 episodes" in out
        episodes(folder, "export", "tutorial-model", "--out", "samples.jsonl")
    finally:
        model.terminate()
        model.wait(10)
    rows = [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 14  # one model call per turn, each a conversation of its own
    for row in rows:
        assert len(row["completion_ids"]) == len(row["completion_logprobs"]) > 0
        assert set(row["completion_mask"]) == {1}
