"""The sandbox: a box made of bubblewrap namespaces on the worker's own host, with an
agent inside that starts its processes (docs/containment.md).

    runtime      SandboxRuntime: the box, its agent channel, its processes
    process      SandboxProcess: one process of a box, seen from the worker
    channel      the worker's end of the agent's Unix socket
    agent        the in-box agent: the compiled C one, else the Python one
    box_init     the agent in Python (and box_init.c, the same in C)
    bwrap        bubblewrap: where it is, the argv that makes a box
    etc          a box's /etc (copied and bound host files)
    seccomp      the seccomp filter every box gets
    limits       LimitWatch: which limit a box went past
    cgroup       a box's cgroup (cgroup v2), and the reaper of dead workers' ones
    cgroup_pool  emptied cgroups parked for the next box

Names of the old `episodes.runtimes.sandbox` module (now `runtime`) still resolve here,
imported when first asked for, so that importing one part of the sandbox does not
import all of it.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

_MAIN = "episodes.runtimes.sandbox.runtime"


def __getattr__(name: str) -> Any:
    # A submodule's name is the import system's to find (`from . import cgroup` asks here
    # first): only the old module's own names import it.
    if name.startswith("__") or importlib.util.find_spec(f"{__name__}.{name}") is not None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(_MAIN)
    if name in module.__all__:
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
