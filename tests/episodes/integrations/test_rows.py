"""One episode as one trainer row, and a spec pointed at the trainer's server: no server."""

from __future__ import annotations

import pytest

from episodes.errors import EpisodesError
from episodes.integrations.rows import EpisodeSplit, point_at, row_of
from episodes.training.samples import IncompleteTokenData, build_samples
from episodes.types.results import EpisodeResult
from episodes.types.spec import parse_spec
from tests.episodes.session.test_agent_session import agent_spec
from tests.episodes.training.test_samples import call


def _result(reward: float | None = 1.0) -> EpisodeResult:
    return EpisodeResult(
        workflow_id="b.t.s0",
        task_id="t",
        sample=0,
        env="kv-store",
        spec_name="s",
        termination="env_done",
        turns=1,
        reward=reward,
        duration_s=1.0,
    )


def test_an_episode_that_extends_is_one_row_with_its_mask_and_logprobs() -> None:
    built = build_samples([call([1, 2], [3, 4]), call([1, 2, 3, 4, 5], [6])])
    row = row_of(_result(), built)
    assert (row.prompt_ids, row.completion_ids) == ([1, 2], [3, 4, 5, 6])
    assert row.completion_mask == [1, 1, 0, 1]
    assert row.logprobs == [-0.03, -0.04, 0.0, -0.06]
    assert (row.reward, row.samples, row.termination) == (1.0, 1, "env_done")
    assert row_of(_result(None), built).reward == 0.0


def test_a_split_episode_raises_or_keeps_its_last_sample() -> None:
    built = build_samples([call([1, 2], [3]), call([1, 9], [4])])
    with pytest.raises(EpisodeSplit, match="split into 2 samples"):
        row_of(_result(), built)
    row = row_of(_result(), built, on_split="last")
    assert (row.prompt_ids, row.completion_ids, row.samples) == ([1, 9], [4], 2)


def test_no_tokens_is_no_row() -> None:
    with pytest.raises(IncompleteTokenData):
        row_of(_result(), build_samples([call([1], [2], logprobs=False)]))
    with pytest.raises(EpisodesError, match="no answered model call"):
        row_of(_result(), build_samples([]))


def test_point_at_replaces_the_upstream_and_keeps_the_key_name() -> None:
    spec = parse_spec(agent_spec("http://old:1/v1"))
    pointed = point_at(spec, "http://trainer:8000/v1", "policy", {"temperature": 1.0, "top_p": 0.9})
    assert pointed.model is not None and spec.model is not None
    assert (pointed.model.base_url, pointed.model.model) == ("http://trainer:8000/v1", "policy")
    assert pointed.model.params == {"temperature": 1.0, "top_p": 0.9}
    assert pointed.model.token_data and pointed.model.api_key_env == spec.model.api_key_env
    assert spec.model.base_url == "http://old:1/v1"  # the spec itself is unchanged
    no_model = spec.model_copy(update={"model": None})
    with pytest.raises(EpisodesError, match="has no model"):
        point_at(no_model, "http://trainer:8000/v1")
