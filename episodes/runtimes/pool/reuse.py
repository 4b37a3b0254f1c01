"""Reuse keys: which episodes may share a pooled box, rendered from a spec's template."""

from __future__ import annotations

import string
from typing import Any

from episodes.errors import SpecError
from episodes.types.results import Task

__all__ = ["render_reuse_key"]

_FIELDS_HINT = "available: {task.id}, {task.data[name]}, {sample}"


class _KeyFormatter(string.Formatter):
    """str.format over `task` and `sample` only, with errors that name the template."""

    def __init__(self, template: str) -> None:
        self._template = template

    def _fail(self, why: str) -> SpecError:
        return SpecError(f"reuse key template {self._template!r}: {why} ({_FIELDS_HINT})")

    def get_field(self, field_name: str, args: Any, kwargs: Any) -> Any:
        # Private attributes would let a spec walk into interpreter internals
        # ("{task.__class__...}"); a key never needs them.
        if "._" in field_name or field_name.startswith("_"):
            raise self._fail(f"field {{{field_name}}} is private")
        try:
            return super().get_field(field_name, args, kwargs)
        except (KeyError, AttributeError, IndexError, TypeError) as exc:
            raise self._fail(f"field {{{field_name}}} not found: {_describe(exc)}") from None

    def get_value(self, key: int | str, args: Any, kwargs: Any) -> Any:
        if isinstance(key, int) or key == "":
            raise self._fail("positional fields like {} are not allowed")
        if key not in kwargs:
            raise self._fail(f"unknown name {key!r}")
        return kwargs[key]


def _describe(exc: BaseException) -> str:
    if isinstance(exc, KeyError):
        return f"no key {exc.args[0]!r}"
    return str(exc)


def render_reuse_key(template: str, task: Task, sample: int) -> str:
    """Render a `str.format`-style reuse key, e.g. "{task.id}" or "{task.data[repo]}:{sample}".

    Raises SpecError naming the template and the missing or bad field.
    """
    formatter = _KeyFormatter(template)
    try:
        key = formatter.format(template, task=task, sample=sample)
    except SpecError:
        raise
    except ValueError as exc:  # malformed braces, bad format spec
        raise formatter._fail(f"invalid template: {exc}") from None
    if not key.strip():
        raise formatter._fail("renders to an empty key")
    return key
