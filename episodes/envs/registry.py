"""Turn an env reference from a spec into an Environment instance.

A reference is a built-in name (`script`, `guess-number`, `python-repl`, `kv-store`,
`harbor`) or
`package.module:Class` naming an `Environment` subclass importable by the worker.
Every failure is one `EnvironmentLoadError` line that names the reference.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import episodes.envs.stale as stale
from episodes.envs.base import Environment
from episodes.errors import EnvironmentLoadError

# Imported lazily so that naming one env never imports the others.
BUILTINS: dict[str, str] = {
    "script": "episodes.envs.script:ScriptEnv",
    "guess-number": "episodes.envs.guess_number:GuessNumberEnv",
    "python-repl": "episodes.envs.python_repl:PythonReplEnv",
    "kv-store": "episodes.envs.kv_store:KvStoreEnv",
    "harbor": "episodes.envs.harbor.env:HarborEnv",
}


def resolve_env_class(ref: str) -> type[Environment]:
    """The Environment subclass `ref` names, imported but not instantiated. A user's env
    module edited since it was imported is warned about, or re-imported (`stale`)."""
    cls = _resolve(ref)
    if stale.refresh([cls.__module__, _module_name(ref)], ref):
        cls = _resolve(ref)
    return cls


def _module_name(ref: str) -> str:
    return BUILTINS.get(ref, ref).partition(":")[0]


def _resolve(ref: str) -> type[Environment]:
    if not isinstance(ref, str) or not ref.strip():
        raise EnvironmentLoadError(f"env {ref!r}: an env reference must be a non-empty string")
    target = BUILTINS.get(ref)
    if target is None:
        if ":" not in ref:
            raise EnvironmentLoadError(
                f"env {ref!r}: unknown built-in env; built-ins are "
                f"{', '.join(sorted(BUILTINS))}, or give 'package.module:Class'"
            )
        target = ref
    module_name, _, attr = target.partition(":")
    if not module_name or not attr or ":" in attr:
        raise EnvironmentLoadError(
            f"env {ref!r}: expected 'package.module:Class' with one ':' between them"
        )
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        missing = e.name or module_name
        raise EnvironmentLoadError(
            f"env {ref!r}: cannot import module {module_name!r} (no module named {missing!r}): "
            "the worker imports the env, so start the worker in the module's directory, "
            "add that directory to PYTHONPATH, or install the module"
        ) from None
    except Exception as e:  # a broken module: report its error, not our traceback
        raise EnvironmentLoadError(
            f"env {ref!r}: importing module {module_name!r} failed: {type(e).__name__}: {e}"
        ) from None
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise EnvironmentLoadError(
                f"env {ref!r}: module {module_name!r} has no attribute {attr!r}"
            ) from None
    if not (isinstance(obj, type) and issubclass(obj, Environment)):
        raise EnvironmentLoadError(
            f"env {ref!r}: {attr!r} is not a subclass of episodes.envs.base.Environment"
        )
    stale.track(module)
    defining = sys.modules.get(obj.__module__)
    if defining is not None:
        stale.track(defining)
    return obj


def check_env_ref(ref: str) -> None:
    """Validate `ref` without creating an env (the CLI calls this before starting anything)."""
    resolve_env_class(ref)


def load_env(ref: str, env_args: dict[str, Any] | None = None) -> Environment:
    """A fresh env for one episode: `ref` resolved, then built with `env_args` as keywords."""
    cls = resolve_env_class(ref)
    args = dict(env_args or {})
    try:
        return cls(**args)
    except (TypeError, ValueError) as e:
        # Wrong or invalid env_args: the env's own message, prefixed with which env.
        raise EnvironmentLoadError(f"env {ref!r}: bad env_args: {e}") from None
