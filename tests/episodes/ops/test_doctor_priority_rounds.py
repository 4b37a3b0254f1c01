"""The priority probe's rounds: one sighting of priority (or fairness) is proof, since a
first-come-first-served server can never serve the later, more urgent start first; a
round that answered without a sighting is evidence against only when no round saw it."""

import pytest

from episodes.ops import doctor_priority
from episodes.ops.doctor_priority import _seen, probe_priority


@pytest.mark.parametrize(
    ("so_far", "now", "expected"),
    [
        (None, None, None),
        (None, False, False),
        (False, None, False),
        (False, False, False),
        (False, True, True),
        (True, False, True),
        (True, None, True),
        (None, True, True),
    ],
)
def test_one_sighting_is_proof(so_far, now, expected) -> None:
    assert _seen(so_far, now) is expected


async def test_rounds_stop_once_both_are_seen_and_a_missed_round_is_not_a_verdict(
    monkeypatch,
) -> None:
    answers = iter([(False, False), (True, None), (None, True), (False, False)])
    rounds = []

    async def once(client):
        rounds.append(1)
        return next(answers)

    monkeypatch.setattr(doctor_priority, "_probe_once", once)
    assert await probe_priority(object()) == (True, True)
    assert len(rounds) == 3  # the matcher loaded late in round 1; rounds 2 and 3 saw it

    answers = iter([(False, False)] * doctor_priority.ROUNDS)
    rounds.clear()
    assert await probe_priority(object()) == (False, False)
    assert len(rounds) == doctor_priority.ROUNDS
