"""Pools of started boxes, reused across episodes by a reuse key.

    runtime_pool  RuntimePool: idle boxes by key, leases, stats
    worker_pools  the pools a worker keeps for its sessions
    reuse         a pool spec's reuse-key template, rendered for a task

Names of the old `episodes.runtimes.pool` module (now `runtime_pool`) still resolve
here, imported when first asked for.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

_MAIN = "episodes.runtimes.pool.runtime_pool"


def __getattr__(name: str) -> Any:
    # A submodule's name is the import system's to find (`from . import cgroup` asks here
    # first): only the old module's own names import it.
    if name.startswith("__") or importlib.util.find_spec(f"{__name__}.{name}") is not None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(_MAIN)
    if name in module.__all__:
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
