"""Pools of started boxes: reused across episodes by a reuse key, or kept warm ahead
of demand.

    runtime_pool  RuntimePool: idle boxes by key, leases, stats
    warm          WarmPool: boxes started ahead of demand, claimed once each
    worker_pools  the pools a worker keeps for its sessions
    reuse         a pool spec's reuse-key template, rendered for a task

Names of the old `episodes.runtimes.pool` module (now `runtime_pool`) still resolve
here, imported when first asked for.
"""

from __future__ import annotations

from episodes import _moved

__getattr__ = _moved.names_of(__name__, "episodes.runtimes.pool.runtime_pool")
