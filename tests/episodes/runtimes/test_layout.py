"""The runtimes' folders: `sandbox`, `docker`, `pool` and `selfcheck` were modules before
they were folders, and their packages still give those modules' names (the rest moved
with aliases, tests/test_moved.py), without importing the whole folder for one part."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

OLD_MODULES = {
    "episodes.runtimes.sandbox": "episodes.runtimes.sandbox.runtime",
    "episodes.runtimes.docker": "episodes.runtimes.docker.runtime",
    "episodes.runtimes.pool": "episodes.runtimes.pool.runtime_pool",
    "episodes.runtimes.selfcheck": "episodes.runtimes.selfcheck.runner",
}


@pytest.mark.parametrize("old", sorted(OLD_MODULES))
def test_a_folder_gives_the_names_of_the_module_it_was(old: str) -> None:
    package, module = importlib.import_module(old), importlib.import_module(OLD_MODULES[old])
    for name in module.__all__:
        assert getattr(package, name) is getattr(module, name), name
    with pytest.raises(AttributeError):
        _ = package.no_such_name


def test_one_part_of_a_folder_does_not_import_the_rest() -> None:
    code = (
        "import sys\n"
        "from episodes.runtimes.sandbox import cgroup\n"
        "import episodes.runtimes.docker.engine, episodes.runtimes.subprocess\n"
        f"print(sorted(m for m in {sorted(OLD_MODULES.values())!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
