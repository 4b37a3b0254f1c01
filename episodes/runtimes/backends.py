"""One registration per runtime backend: how to build its box from a config, and how
to destroy a box of it that a dead worker left behind.

`make_runtime`, the box ledger (`episodes.runtimes.cloud.ledger`) and the doctor
(`episodes.ops.doctor`, which checks every runtime here) all read this table, so adding
a backend is one entry here (and its config in `episodes.types.runtime`).
Each entry names its modules by path: an SDK-backed backend loads only when used.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import import_module
from typing import Any

from episodes.runtimes.base import Runtime
from episodes.types.runtime import RuntimeConfig

Destroyer = Callable[[str, Any], Awaitable[None]]


@dataclass(frozen=True)
class Backend:
    """`build` is `module:Class`, called as `Class(config)` or, with `labels`,
    `Class(config, labels=...)`. `destroy`/`load_sdk` (`module:function`) delete a
    leftover box by id with the platform's SDK: set for backends whose boxes outlive
    their worker and are kept in the ledger (cloud boxes). `load_sdk` also tells the
    doctor whether this worker can use the backend (it raises RuntimeUnavailable
    saying what is missing), and `sdk` names the SDK's distribution, whose version the
    doctor shows (installed by the extra named like the backend)."""

    build: str
    labels: bool = True
    destroy: str | None = None
    load_sdk: str | None = None
    sdk: str | None = None


def _resolve(ref: str) -> Any:
    module, name = ref.split(":")
    return getattr(import_module(module), name)


# Keyed by the config's `type` (and the ledger's `runtime`).
BACKENDS: dict[str, Backend] = {
    # The sandbox, or with `isolation: none` a plain process group (see the function).
    "subprocess": Backend("episodes.runtimes.sandbox.runtime:local_runtime", labels=False),
    "docker": Backend("episodes.runtimes.docker.runtime:DockerRuntime"),
    "modal": Backend(
        "episodes.runtimes.cloud.modal:ModalRuntime",
        destroy="episodes.runtimes.cloud.modal:destroy_sandbox",
        load_sdk="episodes.runtimes.cloud.modal:load_modal_sdk",
        sdk="modal",
    ),
    "prime": Backend(
        "episodes.runtimes.cloud.prime:PrimeRuntime",
        destroy="episodes.runtimes.cloud.prime:destroy_vm",
        load_sdk="episodes.runtimes.cloud.prime:load_prime_sdk",
        sdk="prime-sandboxes",
    ),
    "e2b": Backend(
        "episodes.runtimes.cloud.e2b:E2BRuntime",
        destroy="episodes.runtimes.cloud.e2b:destroy_sandbox",
        load_sdk="episodes.runtimes.cloud.e2b:load_e2b_sdk",
        sdk="e2b",
    ),
}


def make_runtime(config: RuntimeConfig, *, labels: dict[str, str] | None = None) -> Runtime:
    """Build (not start) the runtime a config describes.

    `labels` mark ownership (worker id, session id) where the backend supports it,
    so a reaper can find orphans.
    """
    backend = BACKENDS.get(config.type)
    if backend is None:
        raise TypeError(f"unknown runtime config: {config!r}")
    cls = _resolve(backend.build)
    runtime: Runtime = cls(config, labels=dict(labels or {})) if backend.labels else cls(config)
    return runtime


def destroyer(runtime: str) -> tuple[Destroyer, Callable[[], Any]] | None:
    """How to delete a leftover box of `runtime` and load its SDK; None when its boxes
    are not kept in the ledger (they die with the worker or are reaped by label)."""
    backend = BACKENDS.get(runtime)
    if backend is None or backend.destroy is None or backend.load_sdk is None:
        return None
    return _resolve(backend.destroy), _resolve(backend.load_sdk)


def sdk_loader(runtime: str) -> tuple[str, Callable[[], Any]] | None:
    """The SDK distribution of `runtime` and how to load it (RuntimeUnavailable when it
    cannot be used here); None for backends without an SDK (subprocess, docker)."""
    backend = BACKENDS.get(runtime)
    if backend is None or backend.load_sdk is None or backend.sdk is None:
        return None
    ref = backend.load_sdk
    return backend.sdk, lambda: _resolve(ref)()  # its module imports only when called
