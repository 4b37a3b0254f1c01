"""Old import paths of modules that moved, kept working as aliases.

A package whose modules moved calls `alias(__name__, {"old": "new.dotted.path"})` from
its `__init__.py`; `import episodes.<package>.old` (and `from ... import`) then gives
the module at its new path: the same module object, so a monkeypatch or an
`isinstance` through either path sees one thing. Nothing is imported until an old
path is: a finder looks the name up in one table.

Only the standard library here: any package's `__init__` may call it.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

# old dotted name -> new dotted name, over every package that registered aliases
_TABLE: dict[str, str] = {}


class _AliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path in the table and loads it as the module at the new one."""

    def find_spec(
        self,
        fullname: str,
        path: object = None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _TABLE:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        # The module at the new path, whose own __name__ and __spec__ stay as they are.
        return importlib.import_module(_TABLE[spec.name])

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module ran once, under its new name."""


def alias(package: str, moved: dict[str, str]) -> None:
    """Register `package.<old>` -> `moved[old]` for each old module name."""
    for old, new in moved.items():
        _TABLE[f"{package}.{old}"] = new
    # One finder per process, even where this module is imported afresh (the workflow
    # sandbox re-imports modules): a finder already installed is recognised by name.
    if not any(type(f).__name__ == _AliasFinder.__name__ for f in sys.meta_path):
        sys.meta_path.insert(0, _AliasFinder())


def names_of(package: str, module: str) -> Callable[[str], Any]:
    """A package's `__getattr__` for a module that became that package (the module's
    code moved to `module` inside it): `from package import Name` still gives the old
    module's public names (its `__all__`), imported when first asked for, so that
    importing one part of the package does not import all of it.

        __getattr__ = _moved.names_of(__name__, "episodes.runtimes.sandbox.runtime")
    """

    def __getattr__(name: str) -> Any:
        # A submodule's name is the import system's to find (`from . import cgroup`
        # asks here first): only the old module's own names import it.
        if name.startswith("__") or importlib.util.find_spec(f"{package}.{name}") is not None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        found = importlib.import_module(module)
        if name in found.__all__:
            return getattr(found, name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__


def moved() -> dict[str, str]:
    """Every registered alias (old -> new): for the test that imports them all."""
    return dict(_TABLE)
