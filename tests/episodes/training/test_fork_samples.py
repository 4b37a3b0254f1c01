"""A fork's branch: the calls it replayed from its parent are prompt, never completion."""

from __future__ import annotations

from episodes.training.samples import build_samples
from tests.episodes.training.test_samples import call


def test_replayed_calls_are_prompt_and_live_ones_completion() -> None:
    calls = [
        call([1, 2], [10, 11]),  # the parent's, replayed
        call([1, 2, 10, 11, 3], [12]),  # the parent's, replayed
        call([1, 2, 10, 11, 3, 12, 4], [13, 14]),  # the branch's own
    ]
    [sample] = build_samples(calls, replayed=2).samples
    assert sample.prompt_ids == [1, 2]
    assert sample.completion_ids == [10, 11, 3, 12, 4, 13, 14]
    assert sample.completion_mask == [0, 0, 0, 0, 0, 1, 1]
    assert sample.completion_logprobs == [0.0] * 5 + [-0.13, -0.14]
    # Not a fork: the same calls are all trained on.
    [whole] = build_samples(calls).samples
    assert whole.completion_mask == [1, 1, 0, 1, 0, 1, 1]
