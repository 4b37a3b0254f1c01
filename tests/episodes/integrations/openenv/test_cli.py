"""`episodes serve-openenv` as a user runs it: one-line errors for a bad spec; the
command as a real process serving the docs' example (examples/openenv/bisect.py, with
OpenEnv's own client) on a real dev server and worker; stopped, it parks the sessions
still open instead of ending them."""

from __future__ import annotations

import asyncio
import re
import runpy
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from episodes.cli.main import app
from tests.conftest import ROOT

runner = CliRunner()


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (None, "spec file not found"),
        ("name: x\n", "env: Field required; harness: Field required"),
        (
            "name: x\nenv: no-such-env\nharness: {command: [python]}\ntasks: [{id: a}]\n",
            "no-such-env",
        ),
    ],
    ids=["missing", "invalid", "unknown-env"],
)
def test_a_bad_spec_is_one_line_and_exit_2(tmp_path, text, error) -> None:
    spec = tmp_path / "spec.yaml"
    if text is not None:
        spec.write_text(text)
    result = runner.invoke(app, ["serve-openenv", str(spec), "--address", "127.0.0.1:1"])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and error in lines[0], lines


pytest.importorskip("openenv")

from episodes.viewer.visibility import Filters, list_rows  # noqa: E402
from tests.episodes.integrations.openenv.sessions import progress  # noqa: E402
from tests.support.helpers import wait_until  # noqa: E402

# The docs' example client, as the page runs it.
play = runpy.run_path(str(ROOT / "examples" / "openenv" / "bisect.py"))["play"]


async def _is(value, expected) -> bool:  # type: ignore[no-untyped-def]
    return await value == expected


def _url(log: Path, proc: subprocess.Popen[bytes], timeout_s: float = 180) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace") if log.exists() else ""
        found = re.search(r"at (http://127\.0\.0\.1:\d+)", text)
        if found:
            return found.group(1)
        assert proc.poll() is None, text
        time.sleep(0.2)
    raise AssertionError(f"serve-openenv did not start: {log.read_text()}")


@pytest.mark.slow
@pytest.mark.timeout(400)
async def test_the_command_serves_the_docs_example_and_parks_open_sessions_when_stopped(
    dev_server, client, worker, tmp_path
) -> None:
    from openenv.core import GenericEnvClient

    log = tmp_path / "serve.log"
    argv = [sys.executable, "-m", "episodes.cli.main", "serve-openenv"]
    argv += ["examples/openenv/guess-number.yaml", "--port", "0", "--batch-id", "doc-example"]
    argv += ["--address", dev_server.address, "--task-queue", "episodes-test"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        url = await asyncio.to_thread(_url, log, proc)
        ends = await asyncio.to_thread(play, url, 3)
        assert [e["workflow_id"] for e in ends] == [
            "doc-example.secret-42.s0.session",
            "doc-example.first-try.s0.session",
            "doc-example.wide-range.s0.session",
        ]
        assert all(e["termination"] == "env_done" for e in ends), ends
        assert ends[1]["turn"] == 0 and ends[1]["reward"] == 1.0  # 50 on the first guess

        # The viewer's batch page lists them (what it reads: Temporal's visibility).
        query = Filters(batch="doc-example").query()

        async def listed() -> list[tuple[str, str | None]]:
            rows, _ = await list_rows(client, query, 10)
            return sorted((r["task"], r["termination"]) for r in rows)

        expected = [(t, "env_done") for t in ("first-try", "secret-42", "wide-range")]
        assert await wait_until(lambda: _is(listed(), expected), timeout=60), await listed()

        env = GenericEnvClient(base_url=url, message_timeout_s=180)
        workflow_id = (await env.reset(task_id="wide-range")).observation["workflow_id"]
        await env.step({"message": 500})
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 60) == 0, log.read_text()

        async def parked() -> bool:
            return (await progress(client, workflow_id)).status == "parked"

        assert await wait_until(parked, timeout=120), await progress(client, workflow_id)
        await client.get_workflow_handle(workflow_id).cancel()  # nobody comes back for it
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
