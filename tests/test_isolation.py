"""A test run keeps to its own state: nothing it records lands in the user's home."""

from __future__ import annotations

from pathlib import Path


def test_box_ledgers_of_a_test_run_are_not_the_users() -> None:
    # Every worker a test starts records its cloud boxes there and reaps dead workers'
    # boxes from it: the user's own ledger would gain the fakes' boxes (a reap warning
    # on every later worker start) and lose real ones to a test's reaper.
    from episodes.runtimes.cloud import ledger

    assert ledger.ledger_dir() != Path.home() / ".cache" / "episodes" / "boxes"
