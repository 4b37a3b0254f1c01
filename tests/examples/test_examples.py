"""Every example spec loads, names a loadable env, and its tasks are valid for that env."""

from __future__ import annotations

from pathlib import Path

import pytest

from episodes.envs import check_env_ref, load_env
from episodes.specfile import load_spec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
REQUIRED = {"guess-number.yaml", "python-repl.yaml", "script.yaml", "kv-agent.yaml"}


def test_the_reference_examples_exist():
    assert REQUIRED <= {p.name for p in EXAMPLES.glob("*.yaml")}


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_example_loads_and_its_env_accepts_every_task(name):
    spec = load_spec(EXAMPLES / name)
    check_env_ref(spec.env)
    assert spec.samples >= 2
    tasks = spec.load_tasks()
    assert len(tasks) >= 3
    for task in tasks:
        # A fresh env per episode, as the worker does; reset validates the task's data.
        assert load_env(spec.env, spec.env_args).reset(task) is not None
    assert spec.harness.command[0] == "{python}"
    assert spec.harness.command[1:3] == [
        "-m",
        f"episodes.harness.reference.{_harness_for(spec.env)}",
    ]


def _harness_for(env: str) -> str:
    return {"script": "echo", "guess-number": "guesser", "python-repl": "repl", "kv-store": "llm"}[
        env
    ]
