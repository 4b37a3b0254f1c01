"""Every module that moved is still importable at its old path, as the same module."""

from __future__ import annotations

import importlib
import pkgutil

import episodes
from episodes import _moved


def _register_every_alias() -> None:
    """Aliases register when their old package is imported: import every package."""
    for info in pkgutil.walk_packages(episodes.__path__, "episodes."):
        if info.ispkg:
            importlib.import_module(info.name)


def test_every_old_path_is_the_module_at_its_new_one() -> None:
    _register_every_alias()
    for old, new in sorted(_moved.moved().items()):
        assert importlib.import_module(old) is importlib.import_module(new), old


def test_an_unknown_old_name_is_still_an_import_error() -> None:
    _moved.alias("episodes", {"_moved_probe": "episodes.errors"})
    assert importlib.import_module("episodes._moved_probe") is importlib.import_module(
        "episodes.errors"
    )
    try:
        importlib.import_module("episodes._no_such_module")
    except ModuleNotFoundError:
        pass
    else:
        raise AssertionError("an unregistered name imported")
