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

from episodes import _moved

__getattr__ = _moved.names_of(__name__, "episodes.runtimes.sandbox.runtime")
