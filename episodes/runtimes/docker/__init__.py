"""The Docker runtime: a box is a container of a local (or remote) Docker engine.

    runtime   DockerRuntime: the container, its processes, its orphans
    engine    the SDK client, shared, and the calls off the event loop
    process   DockerProcess: one exec of a container
    limits    DockerLimitWatch: which limit a container went past
    bundle    the runtime bundle mounted into images that are not the project's own

Names of the old `episodes.runtimes.docker` module (now `runtime`) still resolve here,
imported when first asked for.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

_MAIN = "episodes.runtimes.docker.runtime"


def __getattr__(name: str) -> Any:
    # A submodule's name is the import system's to find (`from . import cgroup` asks here
    # first): only the old module's own names import it.
    if name.startswith("__") or importlib.util.find_spec(f"{__name__}.{name}") is not None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(_MAIN)
    if name in module.__all__:
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
