"""The `episodes` command line as a user runs it: a real subprocess, real server."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT


async def episodes(*args: str, timeout: float = 120, cwd: Path = ROOT) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "episodes.cli.main",
        *args,
        cwd=cwd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    return proc.returncode or 0, out.decode(), err.decode()


def write_spec(tmp_path: Path, data: dict, name: str = "spec.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data))
    return p


def good_spec(name: str) -> dict:
    return {
        "name": name,
        "env": "script",
        "tasks": [
            {"id": "a", "data": {"messages": ["x", "é✓"], "expected": ["x", "é✓"]}},
            {"id": "b", "data": {"messages": ["z"], "expected": ["nope"]}},
        ],
        "samples": 2,
        "harness": {"command": "{python} -m episodes.harness.reference.echo"},
    }


async def test_run_end_to_end_then_show(tmp_path, dev_server, worker) -> None:
    name = f"cli-{uuid.uuid4().hex[:6]}"
    spec = write_spec(tmp_path, good_spec(name))
    out = tmp_path / "results.jsonl"
    code, stdout, stderr = await episodes(
        "run",
        str(spec),
        "--address",
        dev_server.address,
        "--task-queue",
        "episodes-test",
        "--out",
        str(out),
    )
    assert code == 0, stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 4
    assert sorted((r["task_id"], r["sample"]) for r in rows) == [
        ("a", 0),
        ("a", 1),
        ("b", 0),
        ("b", 1),
    ]
    assert {r["task_id"]: r["reward"] for r in rows} == {"a": 1.0, "b": 0.0}
    assert "mean reward" in stdout and "0.500" in stdout

    code, stdout, stderr = await episodes(
        "show", f"{name}.a.s0", "--address", dev_server.address, "--json"
    )
    assert code == 0, stderr
    shown = json.loads(stdout)
    assert [t["record"]["reply"] for t in shown["turns"]] == ["x", "é✓"]
    assert shown["result"]["termination"] == "env_done"
    assert "é✓" in stdout and "\\u00e9" not in stdout  # text stays text, not escapes

    code, stdout, stderr = await episodes("show", f"{name}.a.s0", "--address", dev_server.address)
    assert code == 0, stderr
    assert "é✓" in stdout and "\\u00e9" not in stdout


@pytest.mark.parametrize("mode", ["client", "on-server"])
async def test_a_rerun_of_a_finished_batch_says_its_results_are_reused(
    tmp_path, dev_server, client, worker, mode
) -> None:
    """Re-running a spec (say, after editing it) attaches to the batch id's finished
    episodes: their results come back and nothing runs. Silent, that looked as if the
    edit were ignored; the run says so, with what to do."""
    from episodes.client.batch.server import episodes_query

    name = f"again-{uuid.uuid4().hex[:6]}"
    spec = write_spec(tmp_path, good_spec(name))
    args = ["run", str(spec), "--address", dev_server.address, "--task-queue", "episodes-test"]
    args += ["--on-server"] if mode == "on-server" else []
    code, _, stderr = await episodes(*args)
    assert code == 0, stderr
    assert "note:" not in stderr
    # Visibility is eventually consistent: wait until it shows all four finished.
    query = f"{episodes_query(name)} AND ExecutionStatus = 'Completed'"
    for _ in range(300):
        if (await client.count_workflows(query)).count == 4:
            break
        await asyncio.sleep(0.1)
    code, stdout, stderr = await episodes(*args)
    assert code == 0, stderr
    flat = " ".join(stderr.split())
    assert f"note: batch '{name}' (the spec's name) has 4 finished episodes" in flat, stderr
    assert "--fresh (or --batch-id NEW) runs the spec afresh" in flat
    assert "0.500" in stdout, stdout
    # A new batch id is a new batch: nothing to say.
    code, _, stderr = await episodes(*args, "--batch-id", f"{name}-2")
    assert code == 0, stderr
    assert "note:" not in stderr
    # --fresh: past the taken `-2`, a new id derived from the name, and it says so.
    for _ in range(300):
        if (await client.count_workflows(episodes_query(f"{name}-2"))).count == 4:
            break
        await asyncio.sleep(0.1)
    code, stdout, stderr = await episodes(*args, "--fresh")
    assert code == 0, stderr
    said = " ".join(stderr.split())
    assert f"note: --fresh: batch '{name}' has episodes; this run is batch '{name}-3'" in said
    assert f"{name}-3" in stdout, stdout
    assert (await client.count_workflows(episodes_query(f"{name}-3"))).count == 4


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda d: d["harness"].update(comand="x"), "harness.comand: unknown field"),
        (lambda d: d.update(max_turns=0), "max_turns"),
        (lambda d: d.update(env="no-such-env"), "no-such-env"),
        (lambda d: d["harness"].update(runtime={"type": "vm"}), "harness.runtime"),
        (lambda d: d.pop("tasks"), "tasks"),
        (lambda d: d.update(on_worker_lost="retry"), "on_worker_lost"),
        (lambda d: d.update(max_restarts=-1), "max_restarts"),
    ],
)
async def test_bad_specs_exit_2_naming_the_field(tmp_path, mutate, needle) -> None:
    data = good_spec("bad")
    mutate(data)
    spec = write_spec(tmp_path, data)
    # An unreachable address: a bad spec must be reported before any connection.
    code, stdout, stderr = await episodes("run", str(spec), "--address", "127.0.0.1:1")
    assert code == 2
    assert needle in stderr
    assert str(spec) in stderr or "env" in needle or needle == "no-such-env"
    assert "Traceback" not in stderr + stdout


async def test_missing_spec_file_and_unreachable_server(tmp_path) -> None:
    code, _, stderr = await episodes("run", str(tmp_path / "nope.yaml"))
    assert code == 2 and "spec file not found" in stderr
    spec = write_spec(tmp_path, good_spec("unreach"))
    code, stdout, stderr = await episodes("run", str(spec), "--address", "127.0.0.1:1", timeout=60)
    assert code == 2 and "cannot reach Temporal at 127.0.0.1:1" in stderr
    assert "Traceback" not in stderr + stdout


async def test_bad_yaml_is_one_line(tmp_path) -> None:
    p = tmp_path / "broken.yaml"
    p.write_text("name: [unclosed\n")
    code, stdout, stderr = await episodes("run", str(p), "--address", "127.0.0.1:1")
    assert code == 2 and "cannot parse" in stderr and str(p) in stderr
    assert "Traceback" not in stderr + stdout


async def test_a_bad_setting_names_the_flag_that_exists(tmp_path) -> None:
    # `--drain-timeout-s` was blamed as `--drain-timeout`, a flag no command has.
    code, stdout, stderr = await episodes("worker", "--drain-timeout-s", "-1", timeout=60)
    assert code == 2 and "--drain-timeout-s: Input should be greater" in stderr, stderr
    assert "Traceback" not in stderr + stdout


def test_every_setting_is_blamed_on_an_option_the_cli_has() -> None:
    from typer.main import get_command

    from episodes.cli.main import app
    from episodes.client.config import SETTINGS, flag

    worker = get_command(app).commands["worker"]  # type: ignore[attr-defined]
    options = {opt for param in worker.params for opt in param.opts}
    assert {name: flag(name) for name in SETTINGS if flag(name) not in options} == {}


async def test_a_bad_setting_in_a_file_keeps_its_section_in_the_message(tmp_path) -> None:
    # Rich read "[episodes]" as markup and printed "bad.toml  drain_timeout_s".
    p = tmp_path / "bad.toml"
    p.write_text("[episodes]\ndrain_timeout_s = -1\n")
    code, _, stderr = await episodes("worker", "--config", str(p), timeout=60)
    assert code == 2 and "bad.toml [episodes] drain_timeout_s: Input should be" in stderr, stderr


async def test_show_prints_each_message_once_code_as_text_and_the_score(
    tmp_path, dev_server, worker
) -> None:
    code_msg = {"code": "def f():\n    return 1", "lang": "python"}
    markup = "[bold]not markup[/]"
    name = f"show-{uuid.uuid4().hex[:6]}"
    data = good_spec(name)
    data["samples"] = 1
    data["tasks"] = [
        {"id": "a", "data": {"messages": [code_msg, markup], "expected": ["x", markup]}}
    ]
    spec = write_spec(tmp_path, data)
    code, _, stderr = await episodes(
        "run", str(spec), "--address", dev_server.address, "--task-queue", "episodes-test"
    )
    assert code == 0, stderr
    code, stdout, stderr = await episodes("show", f"{name}.a.s0", "--address", dev_server.address)
    assert code == 0, stderr
    # Turn 0 carries the first message: shown there (message, then the echoed reply),
    # not once more above it.
    assert stdout.count("def f():") == 2, stdout
    # A string holding code is text, its lines as they are, not JSON's escapes.
    assert "\\n" not in stdout and "    return 1" in stdout, stdout
    assert markup in stdout  # a message is text, never rich markup
    # The score's details without --json.
    assert "matches" in stdout and "[false, true]" in stdout.replace("\n", " "), stdout


# An env of the user's own, next to the spec: `episodes run` (started here) imports it,
# the worker (the test process, started elsewhere) cannot.
CODEENV = """
from episodes.envs.script import ScriptEnv


class CodeEnv(ScriptEnv):
    pass
"""


@pytest.mark.parametrize("mode", ["client", "on-server"])
async def test_an_env_the_worker_cannot_import_is_one_config_error(
    tmp_path, dev_server, worker, mode
) -> None:
    (tmp_path / "codeenv_27.py").write_text(CODEENV)
    name = f"cfg-{uuid.uuid4().hex[:6]}"
    spec = write_spec(tmp_path, {**good_spec(name), "env": "codeenv_27:CodeEnv"})
    flags = ["--on-server"] if mode == "on-server" else []
    code, stdout, stderr = await episodes(
        "run",
        str(spec),
        "--address",
        dev_server.address,
        "--task-queue",
        "episodes-test",
        *flags,
        cwd=tmp_path,
    )
    assert code == 1, stdout + stderr
    # Printed once under the summary (four episodes), with what to do about it.
    assert stdout.count("configuration error") == 1, stdout
    flat = " ".join(stdout.split())
    assert "(4 episodes, not run again)" in flat
    assert "cannot import module 'codeenv_27'" in flat and "PYTHONPATH" in flat
    assert "harness_start_failed" in flat and "workflow_failed" not in flat
    assert "Traceback" not in stdout + stderr


async def test_a_run_in_which_every_episode_failed_exits_1(tmp_path, dev_server, worker) -> None:
    data = good_spec(f"allfail-{uuid.uuid4().hex[:6]}")
    data["harness"]["command"] = "{python} -c 'import sys; sys.exit(3)'"
    spec = write_spec(tmp_path, data)
    code, stdout, stderr = await episodes(
        "run", str(spec), "--address", dev_server.address, "--task-queue", "episodes-test"
    )
    assert code == 1, stdout + stderr
    assert "every episode failed (harness_start_failed 4)" in " ".join(stdout.split())
