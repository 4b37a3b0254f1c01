"""docs/cli.md lists every command of the CLI, and nothing that is not one: a command
added, renamed or removed without the page fails here (issue 27: `export` and
`harbor check` were missing)."""

from __future__ import annotations

import re
from typing import Any

from typer.main import get_command

from episodes.cli.main import app
from tests.conftest import ROOT

# An overview line: `episodes` and the command's words, in a ```sh block of the page.
_LINE = re.compile(r"^episodes((?: [a-z][a-z-]*)+)")


def _commands(group: Any, prefix: tuple[str, ...] = ()) -> set[str]:
    found: set[str] = set()
    for name, command in group.commands.items():
        if getattr(command, "hidden", False):
            continue
        path = (*prefix, name)
        if hasattr(command, "commands"):
            found |= _commands(command, path)
        else:
            found.add(" ".join(path))
    return found


def _documented() -> set[str]:
    text = (ROOT / "docs" / "cli.md").read_text()
    blocks = re.findall(r"```sh\n(.*?)```", text, flags=re.S)
    listed = set()
    for block in blocks:
        for line in block.splitlines():
            m = _LINE.match(line.strip())
            if m:
                listed.add(m.group(1).strip())
    return listed


def test_every_command_is_on_the_cli_page() -> None:
    commands = _commands(get_command(app))
    assert {"export", "harbor check", "schedule create"} <= commands  # the walk works
    documented = _documented()
    # A documented line names a command, optionally followed by its arguments.
    missing = {c for c in commands if not any(d == c or d.startswith(c + " ") for d in documented)}
    assert missing == set(), f"docs/cli.md does not list: {sorted(missing)}"


def test_the_cli_page_lists_no_command_that_does_not_exist() -> None:
    commands = _commands(get_command(app))
    groups = {c.split(" ")[0] for c in commands if " " in c}
    stale = {
        d
        for d in _documented()
        if not any(d == c or d.startswith(c + " ") for c in commands) and d not in groups
    }
    assert stale == set(), f"docs/cli.md lists what is no command: {sorted(stale)}"
