"""The worker process's collector settings (workers/collector.py)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from workers.collector import YOUNG, tune_collector


@pytest.fixture
def restored() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*before)


class Node:
    other: Node | None = None


def test_startup_is_frozen_and_young_collections_are_rarer(restored: None) -> None:
    middle, old = gc.get_threshold()[1:]
    tune_collector()
    assert gc.get_threshold() == (YOUNG, middle, old)
    assert gc.get_freeze_count() > 1000  # the modules and classes start-up made
    assert gc.isenabled()


def test_cycles_made_after_are_still_collected_without_asking(restored: None) -> None:
    tune_collector()
    a, b = Node(), Node()
    a.other, b.other = b, a
    gone = weakref.ref(a)
    del a, b
    assert gone() is not None  # a cycle: reference counting alone never frees it
    kept: list[list[int]] = [[] for _ in range(YOUNG * 3)]  # containers kept: young collections run
    assert gone() is None
    del kept
