"""Each command's --help shows its own options: a command that hosts no worker lists the
connection and the task queue, not the worker's 16 settings (still accepted, hidden);
help text is paragraphs, not the docstring's source lines."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from episodes.cli.main import app, reflow_help

WORKER_ONLY = ["--max-sessions", "--drain-timeout-s", "--log-format", "--metrics-port"]
runner = CliRunner()


def _help(*args: str, columns: int = 100) -> str:
    reflow_help(app)
    result = runner.invoke(app, [*args, "--help"], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize(
    "command",
    [
        ["show"],
        ["export"],
        ["fork"],
        ["park"],
        ["resume"],
        ["view"],
        ["serve-openenv"],
        ["schedule", "list"],
    ],
    ids=lambda c: " ".join(c),
)
def test_a_command_without_a_worker_shows_no_worker_settings(command) -> None:
    text = _help(*command)
    assert "--address" in text and "--task-queue" in text
    assert not [o for o in WORKER_ONLY if o in text], text


@pytest.mark.parametrize("command", [["worker"], ["run"]], ids=lambda c: c[0])
def test_a_command_with_a_worker_shows_them(command) -> None:
    text = _help(*command)
    assert all(o in text for o in WORKER_ONLY), text


def test_a_hidden_setting_is_still_accepted() -> None:
    # Parsed, not refused as an unknown option: the command fails later, reading the
    # episode, or not at all on usage (exit 2 with "No such option" is the old break).
    result = runner.invoke(app, ["park", "--max-sessions", "3"])
    assert "No such option" not in result.output


def test_help_is_reflowed_to_the_terminal_not_the_source_lines() -> None:
    text = _help("run", columns=80)
    # The docstring's source line ends after "brings up"; at 80 columns a lone "the"
    # used to stand on a line of its own.
    assert not re.search(r"^\s*the\s*$", text, re.MULTILINE), text
    assert "it brings up the embedded dev server" in " ".join(text.split())
