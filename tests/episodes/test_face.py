"""The public face: `import episodes` offers what a trainer or env author needs,
lazily, and the blocking client mirrors the async one."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

import episodes
from episodes.client.blocking.client import SyncEpisodesClient, SyncGroup, SyncInteractiveSession
from episodes.client.core import EpisodesClient
from episodes.client.group.stream import Group
from episodes.client.interactive import InteractiveSession


def _public(cls: type) -> dict[str, object]:
    # `model_*` is pydantic's namespace, not ours.
    found = {n: v for n, v in vars(cls).items() if not n.startswith(("_", "model_"))}
    for name in getattr(cls, "model_fields", {}):  # a model's fields: mirrored as properties
        found.setdefault(name, property())
    return found


def _params(fn: object) -> list[str]:
    fn = fn.__func__ if isinstance(fn, classmethod) else fn
    return [p for p in inspect.signature(fn).parameters if p not in ("self", "cls")]  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("async_cls", "sync_cls"),
    [
        (EpisodesClient, SyncEpisodesClient),
        (InteractiveSession, SyncInteractiveSession),
        (Group, SyncGroup),
    ],
    ids=["client", "session", "group"],
)
def test_the_sync_client_mirrors_every_public_method(async_cls: type, sync_cls: type) -> None:
    ours = _public(sync_cls)
    for name, member in _public(async_cls).items():
        if not callable(member) and not isinstance(member, classmethod | property):
            continue  # plain attributes set in __init__ are mirrored as properties
        assert name in ours, f"{sync_cls.__name__} lacks {name}()"
        if callable(member) or isinstance(member, classmethod):
            assert _params(ours[name]) == _params(member), f"{name}: parameters differ"


def test_the_sync_client_mirrors_the_async_clients_stream_state() -> None:
    """What the async client sets in `__init__` for a trainer to read or set (the last
    stream's counts, the policy version, the fleet) reads through the blocking client."""
    async_client = EpisodesClient(object())  # type: ignore[arg-type]  # never called
    state = {n for n in vars(async_client) if not n.startswith("_")} - {"client", "task_queue"}
    assert {"groups_dropped", "zero_variance_skipped", "budget_exhausted"} <= state
    client = SyncEpisodesClient(None, async_client)  # type: ignore[arg-type]  # no loop used
    for name in sorted(state):
        marker = object()
        setattr(async_client, name, marker)
        assert getattr(client, name) is marker, f"SyncEpisodesClient.{name} does not read through"


def test_the_face_names_resolve() -> None:
    assert set(episodes.__all__) == set(episodes._FACE)
    for name in episodes.__all__:
        assert getattr(episodes, name) is not None, name
    assert episodes.connect.__module__ == "episodes.client.core"
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = episodes.nope  # type: ignore[attr-defined]


def _loaded_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys; print(' '.join(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(out.split())


def test_a_harness_importing_the_sdk_loads_no_pydantic() -> None:
    loaded = _loaded_after("import episodes.harness.sdk")
    assert "episodes.harness.sdk" in loaded
    heavy = sorted(m for m in loaded if m.split(".")[0] in ("pydantic", "temporalio", "yaml"))
    assert not heavy, heavy


def test_import_episodes_loads_nothing_until_asked() -> None:
    loaded = _loaded_after("import episodes")
    assert not {m for m in loaded if m.startswith("episodes.")}
    assert "pydantic" not in loaded


@pytest.mark.parametrize(
    "path", ["episodes.envs.base", "episodes.models", "episodes.client", "episodes.harness.sdk"]
)
def test_the_paths_authors_were_told_to_use_still_work(path: str) -> None:
    __import__(path)


def test_old_model_imports_still_work() -> None:
    from episodes.models import ScoreResult, StepOutcome, Task

    assert StepOutcome is episodes.StepOutcome and ScoreResult is episodes.ScoreResult
    assert Task is episodes.Task
