"""The Harbor task loader and the spec's `harbor:`: every task.toml field is mapped or an
error naming it; no Docker needed."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from episodes.envs.harbor.task import HarborTaskError, load_task, task_dirs
from episodes.errors import SpecError
from episodes.types.spec import parse_spec
from tests.support.harbor import TASKS


def _copy(tmp_path: Path, name: str = "hello-file") -> Path:
    return Path(shutil.copytree(TASKS / name, tmp_path / name))


def test_the_test_dataset_loads() -> None:
    names = [d.name for d in task_dirs(TASKS)]
    assert names == ["busybox-sum", "hello-file", "multi-step"]
    multi = load_task(TASKS / "multi-step")
    assert [s.name for s in multi.steps] == ["create", "append"]
    assert multi.steps[0].min_reward == 1.0 and multi.strategy == "mean"
    # The task's shared tests/ first, the step's own over it.
    assert [p.name for p in multi.steps[1].tests] == ["tests", "tests"]
    busybox = load_task(TASKS / "busybox-sum")
    assert busybox.config.environment.memory_bytes_mb == 256
    assert busybox.steps[0].verifier.env == {"EXPECTED": "42"}


@pytest.mark.parametrize(
    ("toml", "named"),
    [
        ("[environment]\nmcp_servers = []\n", "environment.mcp_servers: not supported"),
        ("[environment]\ngpus = 1\n", "environment.gpus: GPUs are not supported"),
        ("[environment]\nmemory = 'lots'\n", "environment.memory: 'lots' is not a size"),
        ("artifacts = ['/app']\n", "artifacts: not supported"),
        ("[agent]\nsetup_timeout_sec = 5\n", "agent.setup_timeout_sec: not supported"),
        ("[verifier]\nuser = 'root'\n", "verifier.user: not supported"),
        ("[[steps]]\nname = 'x'\nhealthcheck = {}\n", "steps.0.healthcheck: not supported"),
        ("multi_step_reward_strategy = 'mean'\n", "multi_step_reward_strategy needs [[steps]]"),
    ],
)
def test_unsupported_fields_are_errors_naming_them(tmp_path: Path, toml: str, named: str) -> None:
    task = _copy(tmp_path)
    (task / "task.toml").write_text(toml)
    with pytest.raises(HarborTaskError) as e:
        load_task(task)
    assert named in str(e.value), str(e.value)
    assert "\n" not in str(e.value)


def test_missing_files_are_named(tmp_path: Path) -> None:
    task = _copy(tmp_path)
    (task / "tests" / "test.sh").unlink()
    with pytest.raises(HarborTaskError, match=r"tests/test\.sh is missing"):
        load_task(task)
    (task / "environment" / "Dockerfile").unlink()
    with pytest.raises(HarborTaskError, match=r"environment/Dockerfile is missing"):
        load_task(task)


def test_storage_is_accepted_and_reported_as_not_enforced(tmp_path: Path) -> None:
    task = _copy(tmp_path)
    (task / "task.toml").write_text("[environment]\nstorage_mb = 10240\n")
    assert load_task(task).not_enforced() == ["environment.storage_mb"]


def test_the_exact_spec_of_the_issue_parses(tmp_path: Path) -> None:
    spec = parse_spec(
        {"name": "tb", "harbor": "tasks", "harness": "oracle", "samples": 1, "concurrency": 3},
        base_dir=TASKS.parent,
    )
    assert spec.env == "harbor" and spec.harbor == TASKS
    assert spec.env_args == {"retries": 0, "solution": True}
    assert spec.harness.runtime.type == "docker" and spec.harness.runtime.runtime_bundle
    assert [t.id for t in spec.load_tasks()] == ["busybox-sum", "hello-file", "multi-step"]
    assert spec.load_tasks()[1].data == {"path": str(TASKS / "hello-file")}
    nop = parse_spec({"name": "tb", "harbor": str(TASKS), "harness": "nop", "harbor_retries": 2})
    assert nop.env_args == {"retries": 2}


def test_spec_errors_name_the_field() -> None:
    with pytest.raises(SpecError, match="'orcle' is not a built-in harness"):
        parse_spec({"name": "tb", "harbor": str(TASKS), "harness": "orcle"})
    with pytest.raises(SpecError, match="exactly one of 'tasks'"):
        parse_spec({"name": "tb", "harbor": str(TASKS), "harness": "nop", "tasks": [{"id": "a"}]})
    with pytest.raises(SpecError, match="harbor tasks run on the docker runtime"):
        parse_spec(
            {
                "name": "tb",
                "harbor": str(TASKS),
                "harness": {"command": ["x"], "runtime": {"type": "modal"}},
            }
        )


@pytest.mark.parametrize(
    "name", ["instruction.md", "task.toml", "tests", "solution", "environment", "steps/create"]
)
def test_a_task_file_that_links_out_of_the_task_is_refused(tmp_path: Path, name: str) -> None:
    # Task content is untrusted: instruction.md -> a worker file would send the file to
    # the model as the task's instruction; tests -> ~/.ssh would copy the keys in a box.
    task = _copy(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("canary-" + name)
    if name == "steps/create":  # a multi-step task's step directory
        task = _copy(tmp_path, "multi-step")
        shutil.rmtree(task / name)
        (task / name).symlink_to(outside, target_is_directory=True)
    else:
        original = task / name
        if original.is_dir():
            shutil.copytree(original, outside, dirs_exist_ok=True)
            shutil.rmtree(original)
            original.symlink_to(outside, target_is_directory=True)
        else:
            (outside / name).write_text(original.read_text())
            original.unlink()
            original.symlink_to(outside / name)
    with pytest.raises(
        HarborTaskError, match=rf"{re.escape(name)} is a link to .*outside the task"
    ):
        load_task(task)


def test_links_inside_the_task_are_fine(tmp_path: Path) -> None:
    task = _copy(tmp_path)
    (task / "docs").mkdir()
    (task / "instruction.md").rename(task / "docs" / "instruction.md")
    (task / "instruction.md").symlink_to("docs/instruction.md")
    assert "hello" in load_task(task).steps[0].instruction.lower()
