"""The viewer's pure parts: the batch figures, the outcome split, clipping."""

from __future__ import annotations

import json
import math

import pytest

from episodes.viewer.search import find, searchable
from episodes.viewer.stats import batch_stats, histogram, side
from episodes.viewer.transcripts import PART_BUDGET, clip, clip_part, split_error, turn_view
from episodes.viewer.visibility import BadQuery, Filters


def _row(
    task: str,
    sample: int,
    reward: float | None,
    termination: str | None = "env_done",
    attempt: int = 0,
    start: str = "2026-01-01T00:00:00+00:00",
) -> dict:
    return {
        "start": start,
        "id": f"b.{task}.s{sample}" + (f".r{attempt}" if attempt else ""),
        "task": task,
        "sample": sample,
        "attempt": attempt,
        "reward": reward,
        "termination": termination,
        "turns": 3,
        "duration_s": 1.5,
    }


def test_outcome_sides_split_infrastructure_from_agent() -> None:
    assert [side(t) for t in ("env_done", "max_turns")] == ["ok", "ok"]
    for t in ("worker_lost", "workflow_failed", "model_error"):
        assert side(t) == "infra", t
    for t in ("harness_crashed", "harness_start_failed", "protocol_error", "turn_timeout"):
        assert side(t) == "agent", t
    assert (side("env_error"), side(None), side("cancelled")) == ("env", "running", "other")


def test_batch_stats_pass_at_k_advantages_and_retries() -> None:
    rows = [
        _row("a", 0, 1.0),
        _row("a", 1, 0.0),
        _row("a", 2, 1.0),
        _row("a", 3, 0.0),
        _row("b", 0, 0.0),
        _row("b", 1, 0.0),
        # b's third sample: the worker was lost, the batch ran it again and it passed.
        _row("b", 2, None, "worker_lost"),
        _row("b", 2, 1.0, attempt=1),
        _row("c", 0, None, None),  # still running
    ]
    s = batch_stats(rows)
    assert (s["episodes"], s["attempts"], s["running"]) == (8, 9, 1)
    assert s["terminations"] == {"env_done": 7, "running": 1}
    assert s["sides"] == {"ok": 7, "running": 1}
    # a: n=4, c=2; b: n=3, c=1. pass@1 = (0.5 + 1/3) / 2; pass@2 = (1-1/6 + 1-1/3) / 2.
    assert s["pass_at_k"][1] == pytest.approx((0.5 + 1 / 3) / 2)
    assert s["pass_at_k"][2] == pytest.approx((5 / 6 + 2 / 3) / 2)
    assert max(s["pass_at_k"]) == 4 and s["pass_at_k"][4] == 1.0  # only a has 4 samples
    groups = {g["task"]: g for g in s["groups"]}
    assert [m["advantage"] for m in groups["a"]["samples"]] == [0.5, -0.5, 0.5, -0.5]
    assert groups["b"]["mean_reward"] == pytest.approx(1 / 3)
    assert groups["c"]["samples"][0]["advantage"] is None
    assert rows[6]["side"] == "infra"  # the superseded attempt still says what happened
    assert s["reward_histogram"]["counts"][0] == 4 and s["reward_histogram"]["counts"][-1] == 3


def test_the_final_attempt_is_the_one_started_last() -> None:
    """A batch run again after its episodes' workflows failed (`.s0`, then `.s0.r1`):
    the failed id is reused, so the newest run is `.s0` again, not the highest `.r<n>`."""
    later = "2026-01-01T01:00:00+00:00"
    rows = [
        _row("a", 0, None, "workflow_failed"),
        _row("a", 0, None, "workflow_failed", attempt=1),
        _row("a", 0, 1.0, start=later),  # the re-run, under the first id
        _row("a", 1, None, "workflow_failed"),
        _row("a", 1, 0.0, attempt=1, start=later),
    ]
    s = batch_stats(rows)
    assert (s["episodes"], s["attempts"], s["mean_reward"]) == (2, 5, 0.5)
    assert [r["final"] for r in rows] == [False, False, True, False, True]
    assert s["sides"] == {"ok": 2} and s["pass_at_k"][1] == 0.5


def test_histograms() -> None:
    assert histogram([]) == {"edges": [], "counts": []}
    assert histogram([2.0, 2.0]) == {"edges": [2.0, 2.0], "counts": [2]}
    h = histogram([0.0, 0.5, 1.0])
    assert h["edges"][0] == 0.0 and h["edges"][-1] == 1.0 and sum(h["counts"]) == 3
    turns = histogram([1, 2, 2, 5], integers=True)
    assert turns["edges"] == [1, 2, 3, 4, 5, 6] and turns["counts"] == [1, 2, 0, 0, 1]
    assert turns["labels"] == ["1", "2", "3", "4", "5"]


def test_turn_bins_are_labelled_by_the_turn_counts_they_hold() -> None:
    """Every episode with 1 turn: one bin, "1" (it read 1..2, its edges)."""
    one = histogram([1, 1, 1], integers=True)
    assert (one["counts"], one["labels"]) == ([3], ["1"])
    wide = histogram([0, 3, 59], bins=10, integers=True)
    assert wide["labels"][:2] == ["0-5", "6-11"] and wide["labels"][-1] == "54-59"
    assert sum(wide["counts"]) == 3 and wide["counts"][0] == 2 and wide["counts"][-1] == 1


def test_clipping_keeps_list_views_small_and_json_safe() -> None:
    assert clip("x" * 5000).startswith("x" * 2000) and "3,000 more characters" in clip("x" * 5000)
    items = clip(list(range(1000)))
    assert items[:2] == [0, 1] and items[-1] == 999 and "800 more" in items[100]
    assert clip({"lp": -math.inf, "ok": 1.5}) == {"lp": "-inf", "ok": 1.5}
    event = {"kind": "model_call", "request": {"messages": [{"content": "y" * 10_000}] * 3000}}
    small, size = clip_part(event)
    assert size is not None and size > 20_000_000 // 1000
    assert len(json.dumps(small)) <= PART_BUDGET
    assert clip_part({"a": 1}) == ({"a": 1}, None)
    view = turn_view(
        {"record": {"turn": 3, "message": "hi", "events": [event]}, "observation": {"done": True}}
    )
    assert view["clipped"] == {"events.0": size} and view["message"] == "hi"
    assert turn_view({"record": {"turn": 4}, "undecodable": True})["undecodable"] is True


def test_errors_split_off_the_stderr_tail() -> None:
    err = "harness exited with code 3\n--- harness stderr (tail) ---\nTraceback: boom"
    assert split_error(err) == {
        "message": "harness exited with code 3",
        "stderr": "Traceback: boom",
    }
    assert split_error(None) == {"message": None, "stderr": None}


def test_filters_make_visibility_queries_and_refuse_quotes() -> None:
    q = Filters.from_params(
        {"batch": "nightly", "reward_min": "0.5", "since": "2025-01-31", "status": "running"}
    ).query()
    assert 'EpisodeBatch = "nightly"' in q and "EpisodeReward >= 0.5" in q
    assert 'StartTime >= "2025-01-31T00:00:00Z"' in q and 'ExecutionStatus = "Running"' in q
    with pytest.raises(BadQuery, match="quotes"):
        Filters(env='a"b').query()
    with pytest.raises(BadQuery, match="since"):
        Filters.from_params({"since": "yesterday"})


def test_search_reads_what_people_read() -> None:
    turn = {
        "record": {
            "turn": 0,
            "message": "Find the KEY",
            "reply": {"said": "ok"},
            "events": [
                {
                    "kind": "model_call",
                    "request": {"messages": ["key in the prompt"]},
                    "response": {"choices": [{"message": {"content": "the key is 7"}}]},
                },
                {"kind": "tool_call", "name": "get", "arguments": {"k": "key"}, "result": "7"},
            ],
        }
    }
    places = dict(searchable(turn))
    assert "prompt" not in places["events.0"] and "key is 7" in places["events.0"]
    assert find(places["message"], "key") == "Find the KEY"
    assert find("a" * 200 + "needle" + "b" * 200, "needle").startswith("…")
