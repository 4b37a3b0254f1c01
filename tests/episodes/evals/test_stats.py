"""The eval statistics against values computed by hand (the arithmetic in each test)."""

from __future__ import annotations

import math

import pytest

from episodes.errors import EpisodesError
from episodes.evals.comparison import compare
from episodes.evals.stats import (
    Interval,
    TaskTally,
    bootstrap_mean,
    flips,
    pass_at_k,
    pass_at_k_interval,
    pass_hat_k,
    pass_hat_k_interval,
    sign_flip_test,
    standard_error,
    wilson,
)
from episodes.evals.summary import Outcome, summarize


def test_wilson_matches_the_textbook_values() -> None:
    # 8/10 at 95%: z = 1.959964, p = 0.8, denominator 1 + z²/n = 1.384146,
    # centre (0.8 + z²/20) / 1.384146 = 0.716740, half-width
    # z * sqrt(0.8 * 0.2 / 10 + z²/400) / 1.384146 = 0.226578.
    w = wilson(8, 10)
    assert w.low == pytest.approx(0.490162, abs=1e-6)
    assert w.high == pytest.approx(0.943318, abs=1e-6)
    # 0/10: the interval is [0, z²/(n + z²)] = [0, 3.841459 / 13.841459].
    w = wilson(0, 10)
    assert w.low == 0.0
    assert w.high == pytest.approx(0.277533, abs=1e-6)
    assert wilson(0, 0).as_list() == [0.0, 1.0]
    with pytest.raises(ValueError):
        wilson(3, 2)


def test_standard_error_uses_the_sample_deviation() -> None:
    # [1, 2, 3, 4]: mean 2.5, squared deviations 2.25 + 0.25 + 0.25 + 2.25 = 5,
    # s = sqrt(5 / 3) = 1.290994, SE = s / 2.
    assert standard_error([1, 2, 3, 4]) == pytest.approx(0.645497, abs=1e-6)
    assert standard_error([1]) is None


def test_pass_hat_k_and_pass_at_k_for_one_task() -> None:
    # n = 5, c = 3, k = 2: pass^2 = C(3,2)/C(5,2) = 3/10; pass@2 = 1 - C(2,2)/C(5,2) = 9/10.
    assert pass_hat_k(5, 3, 2) == pytest.approx(0.3)
    assert pass_at_k(5, 3, 2) == pytest.approx(0.9)
    assert pass_hat_k(4, 4, 4) == 1.0 and pass_hat_k(4, 3, 4) == 0.0
    with pytest.raises(ValueError):
        pass_hat_k(2, 1, 3)


def test_pass_k_intervals_are_over_tasks() -> None:
    tallies = [TaskTally(2, 2), TaskTally(2, 1), TaskTally(2, 0)]
    value, interval = pass_at_k_interval(tallies, 2)
    assert value == pytest.approx((1 + 1 + 0) / 3)
    assert interval is not None and interval.contains(value)
    value, _ = pass_hat_k_interval(tallies, 2)
    assert value == pytest.approx((1 + 0 + 0) / 3)
    assert pass_at_k_interval(tallies, 3) == (None, None)


def test_bootstrap_is_seeded_and_brackets_the_mean() -> None:
    values = [0.0, 1.0] * 50  # mean 0.5, SE 0.0503: a 95% interval about ±0.0985
    a = bootstrap_mean(values, seed=7)
    assert a == bootstrap_mean(values, seed=7)
    assert a != bootstrap_mean(values, seed=8)
    assert a is not None and a.contains(0.5)
    assert a.low == pytest.approx(0.5 - 0.0985, abs=0.02)
    assert a.high == pytest.approx(0.5 + 0.0985, abs=0.02)
    assert bootstrap_mean([0.25, 0.25]) == Interval(0.25, 0.25)
    assert bootstrap_mean([]) is None


def test_sign_flip_test_counts_every_assignment_when_few() -> None:
    # [1, 1, 1]: 8 sign assignments, only +++ and --- reach |sum| 3.
    assert sign_flip_test([1, 1, 1]) == pytest.approx(2 / 8)
    # [1, 2, 0, -0.5]: the 0 is left out; |sum| 2.5 observed; the sums of ±1 ±2 ±0.5 are
    # ±3.5, ±2.5, ±1.5, ±0.5: four of the eight reach 2.5.
    assert sign_flip_test([1, 2, 0, -0.5]) == pytest.approx(4 / 8)
    assert sign_flip_test([0, 0]) == 1.0
    assert sign_flip_test([]) == 1.0


def test_sign_flip_test_samples_when_many() -> None:
    # 20 equal differences: 2 of 2^20 assignments reach the observed sum, so out of
    # 10,000 random ones almost surely none does: p = 1 / 10,001.
    assert sign_flip_test([0.5] * 20) == pytest.approx(1 / 10_001)
    # Balanced differences: the observed sum is 0, every assignment reaches it.
    assert sign_flip_test([1, -1] * 10) == 1.0
    noisy = [(-1) ** i * (i % 3) for i in range(40)]
    assert sign_flip_test(noisy, seed=3) == sign_flip_test(noisy, seed=3)


def test_the_sampled_test_agrees_with_the_exact_one(monkeypatch) -> None:
    """10,000 random sign assignments estimate the exact p-value within a few of its
    standard errors (sqrt(p(1-p)/10,000) <= 0.005)."""
    from episodes.evals import stats

    diffs = [0.5, 0.25, -0.1, 0.3, 0.7, -0.2, 0.05, 0.4, 0.15, -0.35, 0.6, 0.1]
    exact = sign_flip_test(diffs)
    monkeypatch.setattr(stats, "EXACT_UP_TO", 0)
    sampled = sign_flip_test(diffs)
    assert 0.005 < exact < 0.5  # a value the estimate could miss
    assert sampled == pytest.approx(exact, abs=0.02)
    assert sampled == sign_flip_test(diffs)  # seeded


def test_flips_are_the_tasks_whose_verdict_changed() -> None:
    a = {"t1": True, "t2": False, "t3": True}
    b = {"t1": False, "t2": True, "t3": True, "t4": False}
    assert flips(a, b) == (["t2"], ["t1"])


def _batch(rewards: dict[str, list[float | None]], termination: str = "env_done") -> list[Outcome]:
    return [
        Outcome(task, r, "harness_crashed" if r is None else termination)
        for task, rs in rewards.items()
        for r in rs
    ]


def test_summarize_counts_tasks_not_episodes() -> None:
    # t1 [1, 1], t2 [0, 1], t3 [crashed: 0, 0]; t4's only episode lost its worker: left out.
    outcomes = _batch({"t1": [1, 1], "t2": [0, 1], "t3": [None, 0]})
    outcomes.append(Outcome("t4", None, "worker_lost"))
    s = summarize(outcomes, threshold=1.0)
    assert (s.tasks, s.episodes, s.left_out) == (3, 6, 1)
    # Task means 1, 0.5, 0: mean 0.5, SE = stdev(1, .5, 0) / sqrt(3) = 0.5 / 1.732051.
    assert s.mean_reward is not None
    assert s.mean_reward.value == pytest.approx(0.5)
    assert s.mean_reward.standard_error == pytest.approx(0.288675, abs=1e-6)
    # 3 of 6 episodes passed: Wilson(3, 6).
    assert s.pass_rate is not None and s.pass_rate.value == 0.5
    assert s.pass_rate.interval == wilson(3, 6)
    # pass@1 = mean(1, .5, 0); pass@2 = mean(1, 1, 0); pass^2 = mean(1, 0, 0).
    assert s.pass_at_k[1].value == pytest.approx(0.5)
    assert s.pass_at_k[2].value == pytest.approx(2 / 3)
    assert s.pass_hat_k[2].value == pytest.approx(1 / 3)
    assert set(s.as_dict()) >= {"mean_reward", "pass_rate", "pass_at_k", "pass_hat_k"}


def test_compare_pairs_by_task() -> None:
    a = _batch({"t1": [1, 1], "t2": [0, 1], "t3": [None, 0], "t4": [1]})
    b = _batch({"t1": [1, 1], "t2": [1, 1], "t3": [1, 0], "t5": [0]})
    c = compare(a, b)
    # Paired t1..t3: differences 0, 0.5, 0.5, mean 1/3; the sign-flip test over the
    # two non-zero ones: 2 of 4 assignments reach |1.0|.
    assert c.paired == 3 and (c.only_a, c.only_b) == (["t4"], ["t5"])
    assert c.difference == pytest.approx(1 / 3)
    assert c.p_value == pytest.approx(0.5)
    assert not c.significant
    # Verdicts (at least half the samples pass): t3 failed in A, passes in B.
    assert [(f.task, f.a, f.b) for f in c.flipped] == [("t3", False, True)]
    assert c.flip_rate == pytest.approx(1 / 3)
    d = c.as_dict()
    assert {"difference", "interval", "p_value", "significant", "flipped"} <= set(d)
    assert d["flipped"] == [{"task": "t3", "a": False, "b": True}]


def test_compare_sees_a_large_difference_and_no_difference() -> None:
    tasks = [f"t{i:02d}" for i in range(30)]
    low = [Outcome(t, 0.2, "env_done") for t in tasks]
    high = [Outcome(t, 0.9, "env_done") for t in tasks]
    big = compare(low, high)
    assert big.difference == pytest.approx(0.7)
    assert big.significant and big.p_value < 0.001
    same = compare(low, list(low))
    assert same.difference == 0 and same.p_value == 1.0 and not same.significant
    assert same.interval == Interval(0.0, 0.0)
    assert not math.isnan(big.p_value)


def test_compare_needs_a_shared_task() -> None:
    with pytest.raises(EpisodesError, match="share no task"):
        compare(_batch({"t1": [1]}), _batch({"t2": [1]}))
