"""Runtimes: where a harness process lives (a box). Each backend is registered once in
`backends` (how to build it, how to destroy its orphans); SDK-backed ones import lazily.
Their configs are in `episodes.types.runtime`.

    base, box, box_copy, process_io, host_dirs   what every backend shares
    subprocess                                   a plain process group (no isolation)
    sandbox/                                     bubblewrap boxes on the worker's host
    docker/                                      containers of a Docker engine
    cloud/                                       Modal and Prime boxes, and their ledger
    pool/                                        started boxes reused across episodes
    selfcheck/                                   the checks every backend must pass
"""

from __future__ import annotations

from episodes import _moved
from episodes.runtimes.backends import make_runtime
from episodes.runtimes.base import ByteStream, Runtime, RuntimeProcess

__all__ = ["ByteStream", "Runtime", "RuntimeProcess", "make_runtime"]

# Modules that moved into the folders above. (`sandbox`, `docker`, `pool` and
# `selfcheck` are the folders now: their packages give the old modules' names.)
_moved.alias(
    __name__,
    {
        "sandbox_agent": "episodes.runtimes.sandbox.agent",
        "sandbox_channel": "episodes.runtimes.sandbox.channel",
        "sandbox_init": "episodes.runtimes.sandbox.box_init",
        "sandbox_limits": "episodes.runtimes.sandbox.limits",
        "sandbox_process": "episodes.runtimes.sandbox.process",
        "bwrap": "episodes.runtimes.sandbox.bwrap",
        "box_etc": "episodes.runtimes.sandbox.etc",
        "seccomp": "episodes.runtimes.sandbox.seccomp",
        "cgroup": "episodes.runtimes.sandbox.cgroup",
        "cgroup_pool": "episodes.runtimes.sandbox.cgroup_pool",
        "docker_engine": "episodes.runtimes.docker.engine",
        "docker_limits": "episodes.runtimes.docker.limits",
        "docker_process": "episodes.runtimes.docker.process",
        "bundle": "episodes.runtimes.docker.bundle",
        "modal": "episodes.runtimes.cloud.modal",
        "prime": "episodes.runtimes.cloud.prime",
        "remote_box": "episodes.runtimes.cloud.remote_box",
        "remote_shell": "episodes.runtimes.cloud.remote_shell",
        "ledger": "episodes.runtimes.cloud.ledger",
        "selfcheck_box": "episodes.runtimes.selfcheck.box",
        "selfcheck_fresh": "episodes.runtimes.selfcheck.fresh",
        "selfcheck_kit": "episodes.runtimes.selfcheck.kit",
        "worker_pools": "episodes.runtimes.pool.worker_pools",
        "reuse": "episodes.runtimes.pool.reuse",
    },
)
