"""Dependencies point one way (README, "Layout"), checked on every module's imports.

workers -> activities -> episodes; workflows -> models only. The core of `episodes/`
is Temporal-free; its Temporal-facing parts are named here.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
APP = ("activities", "workers", "workflows")
# What workflow code may import besides its own package, temporalio, the standard
# library and pydantic: models (passed through the sandbox as they are).
MODELS = (
    "episodes.batch_models",
    "episodes.contract",
    "episodes.messages",
    "episodes.metrics",
    "episodes.models",
    "episodes.search_attributes",
    "episodes.spec",
)
# The parts of `episodes/` that import temporalio (and, for the CLI, the worker).
TEMPORAL_FACING = (
    "episodes.client",
    "episodes.cli",
    "episodes.demo",
    "episodes.payloads",  # the data converter: codec, external-storage drivers
    "episodes.contract",  # temporalio.activity, for the activity declarations
    "episodes.search_attributes",  # temporalio.common's keys
)


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _files(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def _imports(nodes: Iterable[ast.AST]) -> set[str]:
    """Every module imported under `nodes`, in functions and TYPE_CHECKING blocks too.
    `from episodes import contract` counts as importing `episodes.contract`."""
    found = set()
    for root in nodes:
        for node in ast.walk(root):
            if isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0 and node.module, "the project uses absolute imports"
                found.add(node.module)
                found |= {
                    f"{node.module}.{a.name}"
                    for a in node.names
                    if _is_module(f"{node.module}.{a.name}")
                }
    return found


def _file_imports(path: Path) -> set[str]:
    return _imports([ast.parse(path.read_text(), str(path))])


def _within(name: str, prefixes: Iterable[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _allowed_in_workflows(name: str) -> bool:
    top = name.split(".")[0]
    if top in sys.stdlib_module_names or top in ("__future__", "temporalio", "pydantic"):
        return True
    return name == "episodes" or _within(name, ("workflows", *MODELS))


@pytest.mark.parametrize("path", _files("workflows"), ids=lambda p: p.name)
def test_workflows_import_only_temporal_and_models(path: Path) -> None:
    bad = sorted(n for n in _file_imports(path) if not _allowed_in_workflows(n))
    assert not bad, f"{path.name} imports {bad}: workflow code imports only models"


@pytest.mark.parametrize("path", _files("workflows"), ids=lambda p: p.name)
def test_only_models_pass_through_the_sandbox(path: Path) -> None:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.With) and "imports_passed_through" in ast.unparse(node.items[0]):
            inner = _imports(node.body)
            bad = sorted(n for n in inner if n != "episodes" and not _within(n, MODELS))
            assert not bad, f"{path.name} passes {bad} through the sandbox"


@pytest.mark.parametrize("path", _files("activities"), ids=lambda p: p.name)
def test_activities_never_import_workers_or_workflows(path: Path) -> None:
    bad = sorted(n for n in _file_imports(path) if _within(n, ("workers", "workflows")))
    assert not bad, f"{path.name} imports {bad}"


CORE = [p for p in _files("episodes") if not _within(_module(p), TEMPORAL_FACING)]


@pytest.mark.parametrize("path", CORE, ids=_module)
def test_the_core_is_temporal_free(path: Path) -> None:
    bad = sorted(n for n in _file_imports(path) if _within(n, ("temporalio", *APP)))
    assert not bad, f"{_module(path)} imports {bad}: the core is Temporal-free"


@pytest.mark.parametrize("path", _files("episodes/client"), ids=lambda p: p.name)
def test_the_client_never_imports_the_application(path: Path) -> None:
    bad = sorted(n for n in _file_imports(path) if _within(n, APP))
    assert not bad, f"{_module(path)} imports {bad}"


def test_the_named_modules_exist() -> None:
    for name in (*MODELS, *TEMPORAL_FACING):
        assert _is_module(name), name
