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

from episodes import _moved

__getattr__ = _moved.names_of(__name__, "episodes.runtimes.docker.runtime")
