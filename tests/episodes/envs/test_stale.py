"""An env module edited after the worker imported it (issue 27): the worker warns once,
naming the module, instead of silently running the old code; with `set_reload(True)`
(`episodes dev --reload`) it imports the module again for the next episodes."""

from __future__ import annotations

import logging
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from episodes.envs import load_env, stale

SOURCE = """
from episodes.envs.base import Environment


class Versioned(Environment):
    VERSION = {version}

    def reset(self, task):
        return self.VERSION
"""


@pytest.fixture
def env_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Path]]:
    name = f"userenv_{uuid.uuid4().hex[:8]}"
    path = tmp_path / f"{name}.py"
    path.write_text(SOURCE.format(version=1))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name, path
    stale.set_reload(False)
    stale.forget(name)
    sys.modules.pop(name, None)


def _edit(path: Path, version: int) -> None:
    path.write_text(SOURCE.format(version=version))
    st = path.stat()  # a later mtime, however coarse the file system's clock
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 2_000_000_000 * version))


def test_an_edited_env_module_is_warned_about_once(env_module, caplog) -> None:
    name, path = env_module
    ref = f"{name}:Versioned"
    assert type(load_env(ref)).VERSION == 1
    caplog.set_level(logging.INFO, logger="episodes.envs")
    assert type(load_env(ref)).VERSION == 1
    assert not caplog.records  # unchanged: nothing to say

    _edit(path, 2)
    assert type(load_env(ref)).VERSION == 1  # the worker still runs what it imported
    load_env(ref)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings  # once per change, not once per episode
    assert name in warnings[0] and str(path) in warnings[0]
    assert "restart the worker" in warnings[0] and "--reload" in warnings[0]

    _edit(path, 3)  # another change: another warning
    load_env(ref)
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 2


def test_reload_imports_an_edited_env_module_again(env_module, caplog) -> None:
    name, path = env_module
    ref = f"{name}:Versioned"
    stale.set_reload(True)
    old = load_env(ref)
    assert type(old).VERSION == 1
    _edit(path, 2)
    caplog.set_level(logging.INFO, logger="episodes.envs")
    new = load_env(ref)
    assert type(new).VERSION == 2
    assert type(old).VERSION == 1  # a running episode keeps the code it started with
    assert any(f"re-imported module {name}" in r.getMessage() for r in caplog.records)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert type(load_env(ref)).VERSION == 2  # and once only
