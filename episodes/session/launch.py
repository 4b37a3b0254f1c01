"""How a session starts its harness: the box's config and the box itself (a pool
lease or a runtime of its own), the harness's argv and environment, the secrets to
scrub. Functions of the spec, for `LiveSession.open`."""

from __future__ import annotations

import functools
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING

from episodes.model.proxy import read_upstream_key
from episodes.runtimes import Runtime, make_runtime
from episodes.runtimes.caps import BoxCaps, is_capacity_error
from episodes.secret_values import resolve_secrets
from episodes.types.results import Task
from episodes.types.runtime import RuntimeConfig, SubprocessConfig
from episodes.types.spec import EpisodeSpec

log = logging.getLogger("episodes.session")

if TYPE_CHECKING:
    from episodes.runtimes.pool.runtime_pool import RuntimePool
    from episodes.runtimes.pool.warm import WarmBoxes


def harness_argv(spec: EpisodeSpec, runtime: Runtime | None = None) -> list[str]:
    """The harness command with `{python}` and `{episodes}` resolved for the runtime it
    runs in: its Python, and the folder holding this package's stdlib-only files there
    (`Runtime.box_python`, `Runtime.box_episodes`; a Docker box with the runtime bundle
    has both whatever its image)."""
    if runtime is not None:
        python, root = runtime.box_python, runtime.box_episodes
    else:
        local = isinstance(spec.harness.runtime, SubprocessConfig)
        python = sys.executable if local else "python3"
        root = _package_root() if local else "/opt/episodes"
    return [p.replace("{python}", python).replace("{episodes}", root) for p in spec.harness.command]


@functools.cache
def _package_root() -> str:
    """The folder holding this package (resolved once: it was a realpath per box)."""
    return str(Path(__file__).resolve().parents[1])


def harness_env(spec: EpisodeSpec, secrets: dict[str, str] | None = None) -> dict[str, str]:
    """The harness's whole environment: what the spec sets, host variables it names and
    its secrets (`resolve_secrets(spec)`, read on this worker; resolved here if not given)."""
    env = {k: os.environ[k] for k in spec.harness.inherit_env if k in os.environ}
    env.update(spec.harness.env)
    env.update(resolve_secrets(spec) if secrets is None else secrets)
    return env


def upstream_key(spec: EpisodeSpec) -> str | None:
    """The model proxy's upstream key, to scrub (a missing one fails in the proxy)."""
    from episodes.errors import ModelError

    if spec.model is None:
        return None
    try:
        return read_upstream_key(spec.model)
    except ModelError:
        return None


def box_config(spec: EpisodeSpec, config: RuntimeConfig | None = None) -> RuntimeConfig:
    """The spec's runtime config (or `config`, one of its spillover runtimes); a sandbox
    also gets the harness command's own files bound read-only (a script named by its
    path), so a spec need not repeat them."""
    config = spec.harness.runtime if config is None else config
    if not isinstance(config, SubprocessConfig) or config.isolation != "sandbox":
        return config
    from episodes.runtimes.sandbox.runtime import command_files

    extra = [f for f in command_files(harness_argv(spec), config.ro_paths)]
    if not extra:
        return config
    return config.model_copy(update={"ro_paths": [*config.ro_paths, *extra]})


async def acquire_runtime(
    box: AsyncExitStack,
    config: RuntimeConfig,
    pool: RuntimePool | None,
    spec: EpisodeSpec,
    task: Task,
    sample: int,
    labels: dict[str, str],
    warm: WarmBoxes | None = None,
) -> tuple[Runtime, bool | None]:
    """A parked, warm or fresh box, entered into `box` so closing it gives the box back
    (or stops it); and whether it came from the reuse pool (None: no pool asked). A
    warm box (claimed from `warm`, started ahead of demand) is a fresh box that is
    already up: it is this episode's, stopped or parked like one started here."""
    claim = None if warm is None else (lambda: warm.claim(config, labels))
    if pool is not None and spec.reuse_key:
        from episodes.runtimes.pool.runtime_pool import render_reuse_key

        key = render_reuse_key(spec.reuse_key, task, sample)
        lease = pool.lease(key, config, labels=labels, claim=claim)
        runtime = await box.enter_async_context(lease)
        return runtime, lease.hit
    claimed = await claim() if claim is not None else None
    if claimed is not None:
        box.push_async_callback(claimed.stop)
        return claimed, None
    runtime = make_runtime(config, labels=labels)
    # Registered before start: a box that failed half-way is still stopped.
    box.push_async_callback(runtime.stop)
    await runtime.start()
    return runtime, None


async def open_box(
    box: AsyncExitStack,
    spec: EpisodeSpec,
    task: Task,
    sample: int,
    labels: dict[str, str],
    *,
    prepare: Callable[[RuntimeConfig], Awaitable[RuntimeConfig]],
    pool: RuntimePool | None = None,
    warm: WarmBoxes | None = None,
    caps: BoxCaps | None = None,
    on_wait: Callable[[], None] | None = None,
    max_wait_s: float | None = None,
) -> tuple[Runtime, bool | None, RuntimeConfig]:
    """The episode's box on the first of the spec's runtimes (`harness.runtimes`) with
    room under the worker's `caps` (waiting for room when none has it: `on_wait` is told
    once), entered into `box`; the box's place is freed when `box` closes. A box the
    runtime refuses as one too many (`is_capacity_error`) tries the spec's next runtime.
    `prepare` turns a runtime config into the box's (the env's `box_config`). Returns
    the box, whether it came from the reuse pool, and its config."""
    candidates = [box_config(spec, c) for c in spec.harness.runtimes]
    while True:
        if caps is None:
            slot, i = None, 0
        else:
            names = [c.type for c in candidates]
            slot, i = await caps.acquire(names, on_wait=on_wait, max_wait_s=max_wait_s)
        attempt = AsyncExitStack()
        try:
            config = await prepare(candidates[i])
            runtime, hit = await acquire_runtime(
                attempt, config, pool, spec, task, sample, labels, warm
            )
        except BaseException as e:
            await attempt.aclose()  # a box that failed half-way is stopped
            if slot is not None:
                slot.release()
            if isinstance(e, Exception) and is_capacity_error(e) and i + 1 < len(candidates):
                log.warning(
                    "%s refused the box as one too many (%s): trying %s",
                    candidates[i].type,
                    str(e).splitlines()[0] if str(e) else type(e).__name__,
                    candidates[i + 1].type,
                )
                candidates = candidates[i + 1 :]
                continue
            raise
        if slot is not None:
            slot.started()
            box.callback(slot.release)  # after the box is stopped or parked (LIFO)
        await box.enter_async_context(attempt)
        return runtime, hit, config
