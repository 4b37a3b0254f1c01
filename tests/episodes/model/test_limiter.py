"""The adaptive limit's arithmetic (episodes/model/limiter.py), on made-up latencies and
a made-up clock: no real time passes."""

from __future__ import annotations

import itertools

from episodes.model.limiter import WARMUP, AdaptiveLimit

FAST = 0.02
SLOW = 0.5


def warmed(ceiling: int = 16) -> AdaptiveLimit:
    lim = AdaptiveLimit(ceiling)
    for _ in range(WARMUP):
        lim.succeeded(FAST, in_flight=ceiling)
    assert lim.limit == ceiling and lim.latency_cuts == 0
    return lim


def test_the_first_calls_only_set_the_baseline():
    lim = AdaptiveLimit(16)
    for _ in range(WARMUP):
        lim.succeeded(SLOW, in_flight=16)
    assert lim.limit == 16.0 and lim.latency_cuts == 0
    assert abs(lim.long_rtt.value - SLOW) < 1e-9


def test_latency_rising_well_above_the_baseline_cuts_the_limit_down_to_one_at_least():
    lim = warmed()
    seen = [lim.limit]
    for _ in range(20):
        lim.succeeded(SLOW, in_flight=lim.places)
        seen.append(lim.limit)
    assert lim.latency_cuts == 20
    assert all(b < a for a, b in itertools.pairwise(seen))  # down with each slow call
    assert seen[-1] < 16.0 / 2
    lim = warmed()
    for _ in range(500):  # however slow it gets
        lim.succeeded(100 * SLOW, in_flight=lim.places)
        assert 1.0 <= lim.limit <= 16.0


def test_a_lasting_new_latency_becomes_the_baseline():
    lim = warmed()
    for _ in range(20):
        lim.succeeded(SLOW, in_flight=lim.places)
    cut = lim.limit
    for _ in range(300):  # the long-term average catches up (as in Gradient2)
        lim.succeeded(SLOW, in_flight=lim.places)
    assert lim.limit > cut
    assert lim.long_rtt.value > SLOW / 2


def test_a_quick_call_does_not_cut_while_the_short_term_average_catches_up():
    lim = warmed()
    for _ in range(5):
        lim.succeeded(SLOW, in_flight=lim.places)
    cut = lim.limit
    lim.succeeded(FAST, in_flight=lim.places)
    assert lim.short_rtt.value > 2 * lim.long_rtt.value  # still high on average
    assert lim.limit > cut  # but the queue has drained: up, not down


def test_latency_within_the_tolerance_does_not_cut():
    lim = warmed()
    for _ in range(50):
        lim.succeeded(1.5 * FAST, in_flight=16)
    assert lim.limit == 16.0 and lim.latency_cuts == 0


def test_the_limit_grows_back_to_its_ceiling_when_latency_falls():
    lim = warmed()
    for _ in range(30):
        lim.succeeded(SLOW, in_flight=lim.places)
    low = lim.limit
    assert low < 16.0
    seen = []
    for _ in range(400):
        lim.succeeded(FAST, in_flight=lim.places)
        seen.append(lim.limit)
    assert seen[-1] == 16.0  # back up, and no further
    assert max(seen) <= 16.0
    assert seen[-1] > low


def test_a_limit_the_worker_does_not_use_is_not_cut():
    lim = warmed()
    for _ in range(40):
        lim.succeeded(SLOW, in_flight=3)  # under half the places: not our load
    assert lim.limit == 16.0 and lim.latency_cuts == 0


def test_calls_without_a_latency_only_add():
    lim = AdaptiveLimit(8)
    lim.throttled(sent_at=0.0, now=1.0)
    assert lim.limit == 4.0
    lim.succeeded(None, in_flight=4)
    assert lim.limit == 4.25


def test_a_429_halves_once_per_wave_and_never_below_one():
    lim = AdaptiveLimit(8)
    lim.throttled(sent_at=0.0, now=1.0)
    lim.throttled(sent_at=0.5, now=1.2)  # sent before the cut: the same wave
    assert lim.limit == 4.0 and lim.throttle_cuts == 1
    lim.throttled(sent_at=1.0, now=2.0)  # sent at the cut: a new wave
    assert lim.limit == 2.0
    for t in range(3, 10):
        lim.throttled(sent_at=float(t), now=float(t))
    assert lim.limit == 1.0 and lim.places == 1


def test_both_signals_act_on_one_limit():
    lim = warmed()
    lim.throttled(sent_at=0.0, now=1.0)
    assert lim.limit == 8.0
    for _ in range(10):
        lim.succeeded(SLOW, in_flight=lim.places)
    assert 1.0 <= lim.limit < 8.0


def test_a_lower_ceiling_lowers_the_limit_a_higher_one_lets_it_grow():
    lim = AdaptiveLimit(16)
    lim.set_ceiling(4)
    assert lim.limit == 4.0
    lim.set_ceiling(8)
    assert lim.limit == 4.0
    for _ in range(100):
        lim.succeeded(None, in_flight=4)
    assert lim.limit == 8.0
