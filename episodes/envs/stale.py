"""Env modules edited after this process imported them.

A worker imports a user's env module (`env: my_module:MyEnv`) once, and Python keeps it:
an edit does nothing until the worker restarts. So every load of an env checks the
file's modification time against the one it had when imported. Changed: one warning
that names the module (once per change), or, with `set_reload(True)` (`episodes dev
--reload`), the module is imported again for the episodes that start from now on (the
running ones keep the code they started with). The package's own modules are not
watched: a developer restarts for those.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from types import ModuleType

log = logging.getLogger("episodes.envs")

# module name -> (its file, the file's mtime in ns when this process imported it)
_imported: dict[str, tuple[str, int]] = {}
_warned: set[tuple[str, int]] = set()
_reload = False


def set_reload(on: bool) -> None:
    """Re-import an env module whose file changed (`episodes dev --reload`)."""
    global _reload
    _reload = on


def reloading() -> bool:
    return _reload


def _mtime(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def _watched(module: ModuleType) -> str | None:
    """The module's source file, if it is a user's module this process can watch."""
    path = getattr(module, "__file__", None)
    if not path or module.__name__.split(".")[0] == "episodes":
        return None
    return path


def track(module: ModuleType) -> None:
    """Remember the file and mtime of a module just imported (the first time only)."""
    path = _watched(module)
    if path is None or module.__name__ in _imported:
        return
    mtime = _mtime(path)
    if mtime is not None:
        _imported[module.__name__] = (path, mtime)


def changed(names: list[str]) -> list[str]:
    """Of these imported modules, those whose file changed since the import."""
    out = []
    for name in dict.fromkeys(names):
        seen = _imported.get(name)
        if seen is None:
            continue
        now = _mtime(seen[0])
        if now is not None and now != seen[1]:
            out.append(name)
    return out


def refresh(names: list[str], ref: str) -> bool:
    """Warn about (or, reloading, re-import) the modules of env `ref` whose file changed;
    True when one was re-imported (the caller resolves `ref` again)."""
    stale = changed(names)
    if not stale:
        return False
    if not _reload:
        for name in stale:
            path, _ = _imported[name]
            key = (name, _mtime(path) or 0)
            if key not in _warned:
                _warned.add(key)
                log.warning(
                    "env %s: module %s (%s) changed since this worker imported it; the "
                    "worker still runs the code it imported: restart the worker (or run "
                    "`episodes dev --reload`)",
                    ref,
                    name,
                    path,
                )
        return False
    # `names` lists the class's own module first, then the one the reference names (it
    # may re-export the class): reloaded in that order.
    for name in stale:
        module = sys.modules.get(name)
        if module is None:
            continue
        _imported.pop(name, None)
        track(importlib.reload(module))
        log.info("env %s: re-imported module %s (its file changed)", ref, name)
    return True


def forget(name: str) -> None:
    """Stop watching a module (tests)."""
    _imported.pop(name, None)
