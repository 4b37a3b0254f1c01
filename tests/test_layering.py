"""Dependencies point one way, checked on every module's imports, transitively.

workers -> activities -> episodes; workflows -> episodes.types (+ contract,
search_attributes). What a workflow module imports, and everything that imports in
turn, is what the workflow sandbox loads: the floors below are checked on that whole
closure, not on the first step only (`episodes/spec.py` once pulled the model proxy's
module and the runtimes' into the sandbox through one innocent-looking import).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
APP = ("activities", "workers", "workflows")
PROJECT = ("episodes", *APP)
# What workflow code may reach, besides its own package, temporalio, the standard
# library and pydantic.
WORKFLOW_FLOOR = (
    "episodes.types",
    "episodes.errors",
    "episodes.contract",
    "episodes.search_attributes",
)
# The types floor: pydantic + the standard library, and the one errors module (itself
# standard library only).
TYPES_FLOOR = ("episodes.types", "episodes.errors")
# The parts of `episodes/` that import temporalio (and, for the CLI, the worker).
TEMPORAL_FACING = (
    "episodes.client",
    "episodes.cli",
    "episodes.ops",  # the doctor and the schedules: a server's checks and cron batches
    "episodes.demo",
    "episodes.payloads",  # the data converter: codec, external-storage drivers
    "episodes.contract",  # temporalio.activity, for the activity declarations
    "episodes.search_attributes",  # temporalio.common's keys
    "episodes.viewer",  # `episodes view`: reads visibility, histories and queries
    "episodes.traces.interceptor",  # the SDK's tracing interceptor, on clients and workers
)
THIRD_PARTY_OK = {"__future__", "temporalio", "pydantic", "pydantic_core", "typing_extensions"}


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _files(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _path(name: str) -> Path | None:
    base = ROOT.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


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
                    if _path(f"{node.module}.{a.name}") is not None
                }
    return found


def _runs(tree: ast.Module) -> list[ast.AST]:
    """The parts of a module that run: all but `if TYPE_CHECKING:` blocks."""
    return [
        n
        for n in tree.body
        if not (isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test))
    ]


@cache
def _direct(name: str) -> frozenset[str]:
    """What module `name` imports when it runs (functions included, TYPE_CHECKING blocks
    not), its parent packages included (importing `episodes.types.results` runs
    `episodes/__init__.py` and `episodes/types/__init__.py`)."""
    path = _path(name)
    if path is None:
        return frozenset()
    found = _imports(_runs(ast.parse(path.read_text(), str(path))))
    parts = name.split(".")
    found |= {".".join(parts[:i]) for i in range(1, len(parts))}
    return frozenset(found)


def _closure(name: str) -> dict[str, str]:
    """Every module reachable from `name` -> the project module that imports it."""
    seen: dict[str, str] = {}
    todo = [name]
    while todo:
        current = todo.pop()
        for dep in _direct(current):
            if dep not in seen:
                seen[dep] = current
                if dep.split(".")[0] in PROJECT:
                    todo.append(dep)
    return seen


def _within(name: str, prefixes: Iterable[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _outside(name: str, floor: tuple[str, ...], *, own: tuple[str, ...] = ()) -> bool:
    top = name.split(".")[0]
    if top in sys.stdlib_module_names or top in THIRD_PARTY_OK:
        return False
    return not (name == "episodes" or _within(name, (*own, *floor)))


def _violations(root: str, floor: tuple[str, ...], own: tuple[str, ...] = ()) -> list[str]:
    reached = _closure(root)
    return sorted(
        f"{dep} (via {via})" for dep, via in reached.items() if _outside(dep, floor, own=own)
    )


@pytest.mark.parametrize("path", _files("workflows"), ids=lambda p: p.name)
def test_workflows_reach_only_the_types_floor(path: Path) -> None:
    bad = _violations(_module(path), WORKFLOW_FLOOR, own=("workflows",))
    assert not bad, f"{path.name} reaches {bad}: workflow code imports only episodes.types"


@pytest.mark.parametrize("path", _files("episodes/types"), ids=lambda p: p.name)
def test_types_reach_only_pydantic_and_the_stdlib(path: Path) -> None:
    bad = _violations(_module(path), TYPES_FLOOR)
    assert not bad, f"{_module(path)} reaches {bad}: types import only pydantic and the stdlib"


def test_errors_import_only_the_stdlib() -> None:
    bad = _violations("episodes.errors", ("episodes.errors", "episodes.types"))
    assert not bad, f"episodes.errors reaches {bad}"


def test_the_package_face_imports_nothing_eagerly() -> None:
    """`import episodes` is what every workflow module's imports run first, and what a
    harness importing `episodes.harness.sdk` runs: it must load nothing on its own."""
    eager = _direct("episodes")
    assert not {n for n in eager if _within(n, PROJECT)}, eager


@pytest.mark.parametrize("path", _files("workflows"), ids=lambda p: p.name)
def test_only_types_pass_through_the_sandbox(path: Path) -> None:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.With) and "imports_passed_through" in ast.unparse(node.items[0]):
            inner = _imports(node.body)
            bad = sorted(n for n in inner if n != "episodes" and not _within(n, WORKFLOW_FLOOR))
            assert not bad, f"{path.name} passes {bad} through the sandbox"


@pytest.mark.parametrize("path", _files("activities"), ids=lambda p: p.name)
def test_activities_never_import_workers_or_workflows(path: Path) -> None:
    bad = sorted(n for n in _direct(_module(path)) if _within(n, ("workers", "workflows")))
    assert not bad, f"{path.name} imports {bad}"


CORE = [p for p in _files("episodes") if not _within(_module(p), TEMPORAL_FACING)]


@pytest.mark.parametrize("path", CORE, ids=_module)
def test_the_core_is_temporal_free(path: Path) -> None:
    bad = sorted(n for n in _direct(_module(path)) if _within(n, ("temporalio", *APP)))
    assert not bad, f"{_module(path)} imports {bad}: the core is Temporal-free"


@pytest.mark.parametrize(
    "path", [*_files("episodes/client"), *_files("episodes/viewer")], ids=_module
)
def test_the_client_never_imports_the_application(path: Path) -> None:
    bad = sorted(n for n in _direct(_module(path)) if _within(n, APP))
    assert not bad, f"{_module(path)} imports {bad}"


# What the runtimes (boxes and their processes) must never reach: the session that uses
# them, and the services it serves to the harness. Only the in-box relay's own module
# (`episodes.tunnel.relay`, stdlib-only: where a box keeps it) is theirs to name.
ABOVE_RUNTIMES = ("episodes.session", "episodes.model", "episodes.tools")


@pytest.mark.parametrize("path", _files("episodes/runtimes"), ids=_module)
def test_runtimes_never_reach_the_session_or_its_services(path: Path) -> None:
    reached = _closure(_module(path))
    bad = sorted(f"{n} (via {via})" for n, via in reached.items() if _within(n, ABOVE_RUNTIMES))
    assert not bad, f"{_module(path)} reaches {bad}: the runtimes sit below the session"


def test_the_closure_goes_beyond_direct_imports() -> None:
    """The check itself: what a module reaches includes what its imports import."""
    direct = _direct("episodes.specfile")
    reached = set(_closure("episodes.specfile"))
    assert "episodes.types.runtime" not in direct and "episodes.types.runtime" in reached


def test_the_named_modules_exist() -> None:
    for name in (*WORKFLOW_FLOOR, *TEMPORAL_FACING):
        assert _path(name) is not None, name


def _edges(path: Path) -> set[str]:
    """The project modules one file imports, anywhere in it (functions and TYPE_CHECKING
    blocks included). `from pkg import sub` is an edge to `pkg.sub` alone when `sub` is a
    module: the package's own file does not run anything of the importer's."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            subs = {f"{node.module}.{a.name}" for a in node.names}
            modules = {s for s in subs if _path(s) is not None}
            found |= modules if modules == subs else {node.module, *modules}
    return {n for n in found if n.split(".")[0] in PROJECT and _path(n) is not None}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next((c for c in children if c in graph), None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycles() -> None:
    """No cycle over every import, `TYPE_CHECKING` and function-level ones included: a
    cycle hidden that way is still two modules that cannot be read apart."""
    cycles = _cycles({_module(p): _edges(p) for pkg in PROJECT for p in _files(pkg)})
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_check_finds_cycles() -> None:
    """The check itself: a two-module cycle and a longer one, apart from a tail."""
    graph = {"a": {"b"}, "b": {"a"}, "c": {"a", "d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}}
    assert sorted(_cycles(graph)) == [["a", "b"], ["c", "d", "e"]]
    assert _edges(ROOT / "episodes" / "specfile.py") >= {"episodes.types.spec"}
