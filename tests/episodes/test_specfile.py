"""A spec file's errors say where: the line of a bad field, the line and column of a YAML
syntax error, and the field a misspelt key was probably meant to be."""

from __future__ import annotations

from pathlib import Path

import pytest

from episodes.errors import SpecError
from episodes.specfile import load_spec

GOOD = """\
name: t
env: guess-number
tasks:
  - id: a
    data: {}
harness:
  command: [python, x.py]
  runtime:
    type: subprocess
    isolation: none
max_turns: 3
"""


def _error(tmp_path: Path, text: str, suffix: str = ".yaml") -> str:
    p = tmp_path / f"spec{suffix}"
    p.write_text(text)
    with pytest.raises(SpecError) as e:
        load_spec(p)
    message = str(e.value)
    assert "\n" not in message and message.startswith(str(p))
    return message


def test_the_good_spec_loads(tmp_path: Path) -> None:
    (tmp_path / "spec.yaml").write_text(GOOD)
    assert load_spec(tmp_path / "spec.yaml").max_turns == 3


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "max_turns: 3",
            "max_turn: 3",
            "line 11: max_turn: unknown field (did you mean `max_turns`?)",
        ),
        (
            "  command:",
            "  comand:",
            "line 7: harness.comand: unknown field (did you mean `command`?)",
        ),
        (
            "    isolation: none",
            "    isolaton: none",
            "line 10: harness.runtime.subprocess.isolaton: unknown field (did you mean `isolation`?)",
        ),
        ("max_turns: 3", "max_turns: 0", "line 11: max_turns: Input should be greater than"),
        ("max_turns: 3", "max_turns: 3\nbogus_setting: 1", "line 12: bogus_setting: unknown field"),
    ],
)
def test_a_bad_field_names_its_line_and_the_near_one(tmp_path, old, new, expected) -> None:
    assert old in GOOD
    message = _error(tmp_path, GOOD.replace(old, new))
    assert expected in message, message


def test_an_unknown_key_far_from_every_field_suggests_nothing(tmp_path: Path) -> None:
    message = _error(tmp_path, GOOD + "zzzqqq: 1\n")
    assert "zzzqqq: unknown field" in message and "did you mean" not in message


def test_a_yaml_syntax_error_gives_line_and_column(tmp_path: Path) -> None:
    message = _error(tmp_path, "name: t\nenv: [unclosed\n")
    assert "cannot parse (line 3, column 1:" in message, message


def test_a_json_syntax_error_gives_line_and_column(tmp_path: Path) -> None:
    message = _error(tmp_path, '{"name": "t",\n  "env": }', suffix=".json")
    assert "cannot parse (line 2, column 10:" in message, message


def test_spec_dir_in_the_harness_command_is_the_spec_files_folder(tmp_path: Path) -> None:
    # A harness file beside the spec: the box's working directory is not the user's,
    # so the command names it from the spec's own folder, wherever the folder is.
    (tmp_path / "spec.yaml").write_text(
        "name: t\nenv: script\ntasks: [{id: a}]\n"
        "harness: {command: 'node {spec_dir}/harness.mjs --x {python}'}\n"
    )
    spec = load_spec(tmp_path / "spec.yaml")
    assert spec.harness.command == ["node", f"{tmp_path.resolve()}/harness.mjs", "--x", "{python}"]
