"""The runtime self-check: plain async checks any backend must pass.

    runner  the checks' runner and its command line (`python -m episodes.runtimes.selfcheck`)
    kit     what a check is given (Subject), and its helpers
    box     checks of the env's handle on a box (`Box`)
    fresh   checks that need a fresh box each

Names of the old `episodes.runtimes.selfcheck` module (now `runner`) still resolve
here, imported when first asked for.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

_MAIN = "episodes.runtimes.selfcheck.runner"


def __getattr__(name: str) -> Any:
    # A submodule's name is the import system's to find (`from . import cgroup` asks here
    # first): only the old module's own names import it.
    if name.startswith("__") or importlib.util.find_spec(f"{__name__}.{name}") is not None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(_MAIN)
    if name in module.__all__:
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
