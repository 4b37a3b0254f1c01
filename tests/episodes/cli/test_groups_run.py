"""`episodes run` streaming groups (a real subprocess, a real dev server and worker): its
progress bar ends full when groups were dropped at `group_timeout_s` or never started
past a budget, and the summary says how many and why."""

from __future__ import annotations

import asyncio
import re
import uuid

import pytest

from tests.conftest import scripted_command
from tests.episodes.cli.test_cli import episodes as cli
from tests.episodes.cli.test_cli import write_spec

pytestmark = pytest.mark.timeout(300)


def _bar(stdout: str) -> tuple[int, int, str]:
    """The progress bar's final line (a console that is no terminal prints the bar once,
    at the end, after the plain progress lines `title: done/total · ...`): completed,
    total, and the text after them."""
    line = [ln for ln in stdout.splitlines() if "(groups)" in ln and "(groups):" not in ln][-1]
    *_, m = re.finditer(r" (\d+)/(\d+) ", line)  # the last: "live 0/2" comes before
    return int(m[1]), int(m[2]), line[m.end() :]


async def test_the_groups_bar_ends_full_when_groups_are_dropped_or_not_started(
    tmp_path, dev_server, worker, monkeypatch
) -> None:
    monkeypatch.setenv("COLUMNS", "300")  # the bar's line whole, not cut at 80 columns
    echo = "{python} -m episodes.harness.reference.echo"
    # Past the budget after the first group: the other two never start.
    budget = {
        "name": f"gbud-{uuid.uuid4().hex[:6]}",
        "env": "script",
        "tasks": [{"id": t, "data": {"messages": ["x"], "expected": ["x"]}} for t in "abc"],
        "samples": 2,
        "concurrency": 2,
        "oversample": 0,
        "skip_zero_variance": True,  # every group scores the same: skipped (and counted)
        "budget": {"max_episode_seconds": 0.001},
        "harness": {"command": echo},
    }
    # Task `slow` never answers its second turn: its group is dropped at group_timeout_s.
    timeout = {
        "name": f"gdrop-{uuid.uuid4().hex[:6]}",
        "env": "script",
        "tasks": [
            {"id": "quick", "data": {"messages": ["x"], "expected": ["x"]}},
            {"id": "slow", "data": {"messages": ["x", "y"], "expected": ["x", "y"]}},
        ],
        "samples": 1,
        "oversample": 1,
        "turn_timeout_s": 120,
        # Generous: the quick group ends in seconds; the slow one waits this long.
        "group_timeout_s": 30,
        "group_on_timeout": "drop",
        "harness": {"command": scripted_command("hang", "turn=1")},
    }

    def run(data: dict):  # type: ignore[no-untyped-def]
        path = write_spec(tmp_path, data, name=f"{data['name']}.yaml")
        return cli(
            *("run", str(path), "--address", dev_server.address, "--task-queue", "episodes-test"),
            timeout=240,
        )

    (bcode, bout, berr), (tcode, tout, terr) = await asyncio.gather(run(budget), run(timeout))
    assert bcode == 0, berr
    done, total, note = _bar(bout)
    assert done == total == 1 and "2 groups not started" in note, bout
    assert "1 zero-variance skipped" in bout and "2 not started (budget reached)" in bout, bout
    # The first group's two episodes ran (skipped after, all scored the same): the
    # budget line counts them, not only the episodes of groups that came out.
    assert "budget_exhausted" in bout and "2 of 6 episodes ran" in bout, bout

    assert tcode == 0, terr
    done, total, note = _bar(tout)
    assert done == total == 1 and "1 group dropped" in note, tout
    assert "groups: 1" in tout and "1 dropped at group_timeout_s" in tout, tout
