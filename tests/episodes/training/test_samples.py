"""Samples from model calls: merged while prompts extend, split with a reason otherwise."""

from __future__ import annotations

import pytest

from episodes.training.samples import IncompleteTokenData, build_samples
from episodes.types.events import ModelCall


def call(
    prompt, completion, *, version=None, logprobs=True, status=200, ids=True, **served
) -> ModelCall:
    """A recorded call; `served`: the fields of records since policy version sources
    (`policy_version_source`, `dispatch_version`); without them, an older record."""
    choice = {"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": "stop"}
    if ids:
        choice["token_ids"] = completion
    if logprobs:
        choice["logprobs"] = {
            "content": [{"token": f"token_id:{t}", "logprob": -t / 100} for t in completion]
        }
    response = {"choices": [choice]}
    if prompt is not None:
        response["prompt_token_ids"] = prompt
    return ModelCall.model_validate(
        {
            "kind": "model_call",
            "request": {},
            "response": response if status == 200 else None,
            "status": status,
            "policy_version": version,
            **served,
        }
    )


def test_extending_calls_merge_with_a_mask_and_aligned_logprobs() -> None:
    built = build_samples(
        [
            call([1, 2], [10, 11]),
            call([1, 2, 10, 11, 3, 4], [12]),  # the tool result 3, 4 in between
            call([1, 2, 10, 11, 3, 4, 12, 5], [13, 14]),
        ]
    )
    (s,) = built.samples
    assert built.complete and built.splits == 0
    assert s.prompt_ids == [1, 2]
    assert s.completion_ids == [10, 11, 3, 4, 12, 5, 13, 14]
    assert s.completion_mask == [1, 1, 0, 0, 1, 0, 1, 1]
    assert s.completion_logprobs == [-0.1, -0.11, 0.0, 0.0, -0.12, 0.0, -0.13, -0.14]
    assert (s.num_model_calls, s.first_call, s.split_reason) == (3, 0, None)


def test_a_prompt_that_rewrites_history_splits_at_the_first_differing_token() -> None:
    built = build_samples([call([1, 2], [10, 11]), call([1, 2, 99, 3], [12])])
    first, second = built.samples
    assert built.splits == 1 and first.split_reason is None
    assert second.split_reason == "prefix_mismatch at token 2"
    assert (second.prompt_ids, second.completion_ids, second.first_call) == ([1, 2, 99, 3], [12], 1)
    # A shorter prompt than the sequence so far mismatches where it ends.
    built = build_samples([call([1, 2], [10, 11]), call([1, 2, 10], [12])])
    assert built.samples[1].split_reason == "prefix_mismatch at token 3"


def test_a_new_dispatch_version_starts_a_new_sample() -> None:
    # Records from before sources: their version was the dispatch version.
    built = build_samples([call([1], [2], version=1), call([1, 2, 3], [4], version=2)])
    assert [s.policy_version for s in built.samples] == [1, 2]
    assert built.samples[1].split_reason == "policy_version 1 -> 2"
    assert [s.completion_policy_versions for s in built.samples] == [[1], [2]]
    # Records since: the dispatch version decides, not the weights that served.
    built = build_samples(
        [
            call([1], [2], version=5, policy_version_source="upstream", dispatch_version=1),
            call([1, 2, 3], [4], version=5, policy_version_source="upstream", dispatch_version=2),
        ]
    )
    assert [s.policy_version for s in built.samples] == [1, 2]
    assert built.samples[1].split_reason == "policy_version 1 -> 2"


def test_weights_updated_mid_episode_keep_one_sample_with_per_token_versions() -> None:
    built = build_samples(
        [
            call([1, 2], [10, 11], version=3, policy_version_source="upstream", dispatch_version=3),
            call(
                [1, 2, 10, 11, 5],
                [12],
                version=4,
                policy_version_source="replica",
                dispatch_version=3,
            ),
            call(
                [1, 2, 10, 11, 5, 12, 6, 7],
                [13, 14],
                version=5,
                policy_version_source="upstream",
                dispatch_version=3,
            ),
        ]
    )
    (s,) = built.samples
    assert built.splits == 0 and s.policy_version == 3
    assert s.completion_ids == [10, 11, 5, 12, 6, 7, 13, 14]
    assert s.completion_mask == [1, 1, 0, 1, 0, 0, 1, 1]
    # Each call's span (the prompt tokens before its sampled ones, then those) is its own.
    assert s.completion_policy_versions == [3, 3, 4, 4, 5, 5, 5, 5]
    assert (s.min_policy_version, s.max_policy_version) == (3, 5)
    assert (built.min_policy_version, built.max_policy_version) == (3, 5)  # the episode's


def test_no_version_known_leaves_the_versions_out() -> None:
    (s,) = build_samples([call([1], [2]), call([1, 2, 3], [4])]).samples
    assert s.completion_policy_versions is None
    assert s.min_policy_version is None and s.max_policy_version is None
    built = build_samples([call([1], [2]), call([1, 2, 3], [4])])
    assert built.min_policy_version is None and built.max_policy_version is None


def test_a_forks_replayed_calls_do_not_count_in_its_version_span() -> None:
    calls = [
        call([1], [2], version=1, policy_version_source="dispatch", dispatch_version=4),
        call([1, 2, 3], [4], version=4, policy_version_source="dispatch", dispatch_version=4),
    ]
    (s,) = build_samples(calls, replayed=1).samples
    assert s.completion_mask == [0, 0, 1]
    assert s.completion_policy_versions == [1, 4, 4]
    assert (s.min_policy_version, s.max_policy_version) == (4, 4)


def test_missing_token_data_names_the_call_and_never_fills_the_gap() -> None:
    built = build_samples(
        [
            call([1], [2]),
            call(None, [3]),  # no prompt ids: an old vLLM, or token_data off
            call([1, 2, 5, 3, 6], [4]),
        ]
    )
    assert [(c.call, c.reason) for c in built.incomplete] == [
        (1, "no prompt ids (prompt_token_ids)")
    ]
    # The call after the hole is not merged over it.
    assert built.samples[1].split_reason == "after incomplete call 1"
    with pytest.raises(IncompleteTokenData, match=r"episode e1: model call 1 has no usable"):
        built.require_complete("e1")
    no_lp = build_samples([call([1], [2], logprobs=False)])
    assert no_lp.incomplete[0].reason == "no logprobs (choices[0].logprobs)"


def test_unanswered_calls_are_left_out_and_counted() -> None:
    built = build_samples([call([1], [2]), call([1, 2], [], status=502), call([1, 2, 7], [3])])
    assert built.unanswered == 1 and built.complete
    assert built.samples[0].completion_mask == [1, 0, 1]


def test_a_model_call_truncated_in_history_makes_the_episode_incomplete() -> None:
    """Record caps replace an oversized event with a marker: its tokens are gone, and
    the next call's prompt must not be merged over the hole as if the env wrote them."""
    from episodes.training.samples import samples_of
    from episodes.truncate import cap
    from episodes.types.results import Task, Transcript, TurnRecord

    def raw(prompt, completion):
        return call(prompt, completion).model_dump()

    big, _ = cap(raw([1, 2, 10], [11]), 64)
    events = [raw([1], [10]), big, raw([1, 10, 2, 10, 11, 3], [12])]
    built = samples_of(Transcript(task=Task(id="t"), turns=[TurnRecord(turn=0, events=events)]))
    assert not built.complete
    assert built.incomplete[0].call == 1 and "truncated" in built.incomplete[0].reason
    assert built.samples[-1].split_reason == "after incomplete call 1"
