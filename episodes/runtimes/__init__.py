"""Runtimes: where a harness process lives. SDK-backed ones import lazily."""

from __future__ import annotations

from episodes.runtimes.base import ByteStream, Runtime, RuntimeProcess
from episodes.types.runtime import (
    DockerConfig,
    ModalConfig,
    PrimeConfig,
    RuntimeConfig,
    SubprocessConfig,
)

__all__ = [
    "ByteStream",
    "DockerConfig",
    "ModalConfig",
    "PrimeConfig",
    "Runtime",
    "RuntimeConfig",
    "RuntimeProcess",
    "SubprocessConfig",
    "make_runtime",
]


def make_runtime(config: RuntimeConfig, *, labels: dict[str, str] | None = None) -> Runtime:
    """Build (not start) the runtime a config describes.

    `labels` mark ownership (worker id, session id) where the backend supports it,
    so a reaper can find orphans.
    """
    labels = dict(labels or {})
    if isinstance(config, SubprocessConfig):
        from episodes.runtimes.subprocess import SubprocessRuntime

        return SubprocessRuntime(config)
    if isinstance(config, DockerConfig):
        from episodes.runtimes.docker import DockerRuntime

        return DockerRuntime(config, labels=labels)
    if isinstance(config, ModalConfig):
        from episodes.runtimes.modal import ModalRuntime

        return ModalRuntime(config, labels=labels)
    if isinstance(config, PrimeConfig):
        from episodes.runtimes.prime import PrimeRuntime

        return PrimeRuntime(config, labels=labels)
    raise TypeError(f"unknown runtime config: {config!r}")
