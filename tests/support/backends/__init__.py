"""Runtime backends under test: one module each, discovered by name (see
tests/episodes/runtimes/conftest.py)."""

from __future__ import annotations

import importlib
import os
import pkgutil
from types import ModuleType

import pytest


def discover() -> list[ModuleType]:
    """Every backend module in this package, sorted by module name."""
    names = sorted(i.name for i in pkgutil.iter_modules(__path__) if not i.name.startswith("_"))
    return [importlib.import_module(f"{__name__}.{name}") for name in names]


used: list[ModuleType] = []


def require(mod: ModuleType) -> None:
    """Skip the current test when `mod` cannot run here, or fail if EPISODES_REQUIRE names it."""
    reason = mod.skip_reason()
    if reason is None:
        if mod not in used:
            used.append(mod)
        return
    required = {s.strip() for s in os.environ.get("EPISODES_REQUIRE", "").split(",")}
    if mod.NAME in required:
        pytest.fail(f"the {mod.NAME} backend is required (EPISODES_REQUIRE) but: {reason}")
    pytest.skip(f"{mod.NAME}: {reason}")
