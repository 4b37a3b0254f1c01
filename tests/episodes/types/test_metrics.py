"""Batch metrics against values computed by hand."""

from __future__ import annotations

from datetime import timedelta

import pytest

from episodes.errors import EpisodesError, ScheduleError
from episodes.ops.schedules import parse_every
from episodes.types.io import BatchInput
from episodes.types.metrics import DurationSketch, MetricsAccumulator, pass_at_k, report_ks


def test_pass_at_k_by_hand() -> None:
    # n=3, c=1: pass@1 = 1/3; pass@2 = 1 - C(2,2)/C(3,2) = 2/3; pass@3 = 1.
    assert pass_at_k(3, 1, 1) == pytest.approx(1 / 3)
    assert pass_at_k(3, 1, 2) == pytest.approx(2 / 3)
    assert pass_at_k(3, 1, 3) == 1.0
    # n=5, c=2, k=2: 1 - C(3,2)/C(5,2) = 1 - 3/10.
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)
    assert pass_at_k(4, 0, 2) == 0.0
    assert pass_at_k(4, 4, 1) == 1.0
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)


def _acc(samples: int, threshold: float = 1.0) -> MetricsAccumulator:
    return MetricsAccumulator(samples=samples, pass_threshold=threshold)


def test_batch_metrics_by_hand() -> None:
    acc = _acc(samples=3)
    # task a: rewards 1, 0, 1 -> c=2; task b: 0.5, None (crashed), 0 -> c=0;
    # task c: 1, 1, 1 -> c=3.
    acc.add("a", "env_done", 1.0, 2.0)
    acc.add("a", "env_done", 0.0, 4.0)
    acc.add("a", "env_done", 1.0, 6.0)
    acc.add("b", "env_done", 0.5, 1.0)
    acc.add("b", "harness_crashed", None, 3.0)
    acc.add("b", "max_turns", 0.0, 5.0)
    acc.add("c", "env_done", 1.0, 7.0)
    acc.add("c", "env_done", 1.0, 8.0)
    acc.add("c", "env_done", 1.0, 9.0)
    m = acc.summary()
    assert m.count == 9
    assert m.rewarded == 8
    assert m.mean_reward == pytest.approx((1 + 0 + 1 + 0.5 + 0 + 1 + 1 + 1) / 8)
    assert m.passed == 5
    assert m.terminations == {"env_done": 7, "harness_crashed": 1, "max_turns": 1}
    # pass@1 = mean(2/3, 0, 1); pass@2 = mean(1 - C(1,2)/C(3,2)=1, 0, 1); pass@3 = mean(1,0,1)
    assert m.pass_at_k[1] == pytest.approx((2 / 3 + 0 + 1) / 3)
    assert m.pass_at_k[2] == pytest.approx(2 / 3)
    assert m.pass_at_k[3] == pytest.approx(2 / 3)
    assert m.pass_at_k_tasks == {1: 3, 2: 3, 3: 3}
    # Finished tasks are folded into sums: the state does not grow with the batch.
    assert acc.open_tasks == {}
    assert acc.closed_tasks == 3
    # Durations 1..9 s: nearest rank p50 = 5th = 5 s, p90 = 9th = 9 s; mean 5 s.
    assert m.duration_s.p50 == pytest.approx(5.0, rel=0.01)
    assert m.duration_s.p90 == pytest.approx(9.0, rel=0.01)
    assert m.duration_s.mean == pytest.approx(5.0)
    assert (m.duration_s.min, m.duration_s.max) == (1.0, 9.0)


def test_threshold_and_partial_tasks() -> None:
    acc = _acc(samples=2, threshold=0.5)
    acc.add("a", "env_done", 0.5, 1.0)  # passes at threshold 0.5
    acc.add("a", "env_done", 0.4, 1.0)
    acc.add("b", "env_done", 0.9, 1.0)  # b has one of its two samples so far
    m = acc.summary()
    assert m.passed == 2
    # pass@1 over a (1/2) and b (1/1); pass@2 only over a, the one task with 2 samples.
    assert m.pass_at_k[1] == pytest.approx((0.5 + 1.0) / 2)
    assert m.pass_at_k_tasks == {1: 2, 2: 1}
    assert m.pass_at_k[2] == pytest.approx(1.0)
    assert list(acc.open_tasks) == ["b"]


def test_groups_complete_or_failed_as_their_tasks_close() -> None:
    acc = _acc(samples=2)
    acc.add("a", "env_done", 1.0, 1.0)
    acc.add("b", "worker_lost", None, 1.0, infra=True, retries=1)
    acc.add("a", "harness_crashed", None, 1.0)  # the agent's outcome: a complete group
    m = acc.summary()
    assert (m.groups_complete, m.groups_failed) == (1, 0)  # b is still open
    acc.add("b", "env_done", 0.0, 1.0)
    m = acc.summary()
    assert (m.groups_complete, m.groups_failed) == (1, 1)


def test_zero_variance_groups_counted_as_their_tasks_close() -> None:
    """A complete group whose members all have the same reward carries no GRPO signal;
    one reward apart, one member unrewarded, or a failed group is not counted."""
    acc = _acc(samples=3)
    for task, rewards in {
        "same": [1.0, 1.0, 1.0],
        "zeros": [0.0, 0.0, 0.0],
        "apart": [1.0, 1.0, 0.5],
        "unrewarded": [1.0, None, 1.0],
    }.items():
        for r in rewards:
            acc.add(task, "env_done" if r is not None else "env_error", r, 1.0)
    acc.add("failed", "env_done", 1.0, 1.0)
    acc.add("failed", "env_done", 1.0, 1.0)
    assert acc.summary().groups_zero_variance == 2  # `failed` is still open
    acc.add("failed", "model_error", 1.0, 1.0, infra=True)
    m = MetricsAccumulator.model_validate_json(acc.model_dump_json()).summary()
    assert (m.groups_complete, m.groups_failed, m.groups_zero_variance) == (4, 1, 2)


def test_a_group_open_across_the_change_is_never_zero_variance() -> None:
    """A tally carried from a run before rewards were tallied saw a member's reward
    unrecorded: not counted, whatever the rest score."""
    old = {"samples": 2, "count": 1, "open_tasks": {"a": {"n": 1, "passed": 1}}}
    acc = MetricsAccumulator.model_validate(old)
    acc.add("a", "env_done", 1.0, 1.0)
    assert (acc.summary().groups_complete, acc.summary().groups_zero_variance) == (1, 0)


def test_metrics_from_before_groups_still_decode() -> None:
    old = {"samples": 2, "count": 1, "open_tasks": {"a": {"n": 1, "passed": 1}}}
    acc = MetricsAccumulator.model_validate(old)
    acc.add("a", "env_done", 1.0, 1.0)
    assert (acc.summary().groups_complete, acc.summary().groups_failed) == (1, 0)


def test_accumulator_survives_a_json_round_trip() -> None:
    """What continue-as-new does to it: serialize, carry, keep adding."""
    acc = _acc(samples=2)
    acc.add("a", "env_done", 1.0, 0.5)
    acc.add("b", "env_done", 0.0, 12.0)
    again = MetricsAccumulator.model_validate_json(acc.model_dump_json())
    again.add("a", "env_done", 0.0, 3.0)
    again.add("b", "env_done", 1.0, 0.0004)
    acc.add("a", "env_done", 0.0, 3.0)
    acc.add("b", "env_done", 1.0, 0.0004)
    assert again.summary() == acc.summary()
    assert again.summary().pass_at_k == {1: pytest.approx(0.5), 2: pytest.approx(1.0)}


def test_duration_percentiles_within_one_percent() -> None:
    sketch = DurationSketch()
    values = [i / 10 for i in range(1, 1001)]  # 0.1 .. 100.0 s
    for v in reversed(values):
        sketch.add(v)
    # Nearest rank of 1000 values: the 500th, 900th and 990th.
    for q, exact in ((0.5, 50.0), (0.9, 90.0), (0.99, 99.0)):
        assert sketch.quantile(q) == pytest.approx(exact, rel=0.01), q
    # Bounded: ~1% buckets over three decades, not one entry per value.
    assert len(sketch.buckets) < 400
    assert DurationSketch().quantile(0.5) is None


def test_report_ks() -> None:
    assert report_ks([1, 2, 3]) == [1, 2, 3]
    assert report_ks(range(1, 101)) == [1, 2, 5, 10, 20, 50, 100]
    assert report_ks(range(1, 8)) == [1, 2, 5, 7]
    assert report_ks([]) == []


def test_parse_every() -> None:
    assert parse_every("6h") == timedelta(hours=6)
    assert parse_every("1h30m") == timedelta(minutes=90)
    assert parse_every("1d") == timedelta(days=1)
    assert parse_every("90s") == timedelta(seconds=90)
    for bad in ("", "6", "6x", "h", "1.5h", "0s"):
        with pytest.raises(ScheduleError):
            parse_every(bad)


def test_oversized_batch_input_is_one_clear_error() -> None:
    from episodes.client.batch.server import batch_input
    from tests.support.helpers import spec

    big = "x" * 2000
    s = spec(tasks=[{"id": f"t{i}", "data": {"messages": [big]}} for i in range(1000)])
    with pytest.raises(EpisodesError, match="payload"):
        batch_input(s)
    small = batch_input(spec())
    assert isinstance(small, BatchInput) and small.spec.tasks
