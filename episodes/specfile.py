"""Reading a spec file (YAML or JSON) into an `EpisodeSpec`.

Apart from `episodes.types.spec` because it loads a YAML parser, which the workflow
sandbox has no business importing. Errors say where in the file: a YAML syntax error
its line and column, a bad field the line it is on.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from episodes.errors import SpecError
from episodes.types.spec import EpisodeSpec, parse_spec


def load_spec(path: str | Path) -> EpisodeSpec:
    """Read a YAML or JSON spec file."""
    p = Path(path)
    if not p.exists():
        raise SpecError(f"{p}: spec file not found")
    text = p.read_text()
    try:
        if p.suffix == ".json":
            data = json.loads(text)
        else:
            data = yaml.safe_load(text)
    except json.JSONDecodeError as e:
        raise SpecError(f"{p}: cannot parse (line {e.lineno}, column {e.colno}: {e.msg})") from None
    except yaml.MarkedYAMLError as e:
        raise SpecError(f"{p}: cannot parse ({_yaml_problem(e)})") from None
    except Exception as e:  # any other parser error: one clear line
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise SpecError(f"{p}: cannot parse ({first})") from None
    where = None if p.suffix == ".json" else _yaml_lines(text)
    return parse_spec(data, source=str(p), base_dir=p.parent, where=where)


def _yaml_problem(e: yaml.MarkedYAMLError) -> str:
    """`line 3, column 7: found unexpected end of stream` (1-based, as editors count)."""
    mark = e.problem_mark or e.context_mark
    what = e.problem or e.context or type(e).__name__
    if mark is None:
        return what
    return f"line {mark.line + 1}, column {mark.column + 1}: {what}"


def _yaml_lines(text: str) -> Callable[[tuple[int | str, ...]], str | None]:
    """Where a validation error's location is in the YAML text: `line N` of the deepest
    key (or item) of the location the file has (a missing field: its parent's line)."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        root = None

    def where(loc: tuple[int | str, ...]) -> str | None:
        node: Any = root
        line = None
        for part in loc:
            found = _child(node, part)
            if found is None:
                continue  # a union's tag, or a field the file does not have
            key, node = found
            line = (key or node).start_mark.line + 1
        return None if line is None else f"line {line}"

    return where


def _child(node: Any, part: int | str) -> tuple[Any, Any] | None:
    """(key node, value node) of `part` under a YAML mapping or sequence node."""
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.value == str(part):
                return key, value
    elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
        if 0 <= part < len(node.value):
            return None, node.value[part]
    return None
