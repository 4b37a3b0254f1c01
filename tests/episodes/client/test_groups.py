"""Groups' pure parts: whose failure an outcome is (defined once), a group's advantages,
and the spec an episode is dispatched with at a policy version."""

from __future__ import annotations

from typing import get_args

import pytest

from episodes.client.batch.dispatch import dispatch_spec
from episodes.client.group.stream import Group
from episodes.errors import EpisodesError
from episodes.training import episode_advantages
from episodes.types.results import (
    AGENT_TERMINATIONS,
    ENV_TERMINATIONS,
    INFRA_TERMINATIONS,
    OK_TERMINATIONS,
    RERUN_TERMINATIONS,
    EpisodeResult,
    Termination,
    is_infra_failure,
)
from episodes.viewer.stats import side
from tests.support.helpers import spec


def test_every_termination_has_exactly_one_side() -> None:
    sides = [OK_TERMINATIONS, AGENT_TERMINATIONS, ENV_TERMINATIONS, INFRA_TERMINATIONS]
    for t in get_args(Termination):
        owners = [s for s in sides if t in s]
        assert len(owners) == (0 if t == "cancelled" else 1), t
    assert RERUN_TERMINATIONS <= INFRA_TERMINATIONS
    assert side("model_error") == "infra" and side("harness_crashed") == "agent"


def test_what_a_batch_runs_again() -> None:
    assert is_infra_failure("worker_lost") and is_infra_failure("model_error")
    assert is_infra_failure("workflow_failed", provision_failed=True)
    assert not is_infra_failure("workflow_failed")  # a bug or a bad spec: not re-run
    for agent in ("harness_crashed", "harness_start_failed", "turn_timeout", "env_error"):
        assert not is_infra_failure(agent)


def _result(sample: int, reward: float | None, termination: str = "env_done") -> EpisodeResult:
    return EpisodeResult(
        workflow_id=f"b.t.s{sample}",
        task_id="t",
        sample=sample,
        env="script",
        spec_name="s",
        termination=termination,  # type: ignore[arg-type]
        turns=1,
        reward=reward,
        duration_s=1.0,
    )


def _group(rewards: list[float | None], failed: str | None = None) -> Group:
    results = [_result(i, r) for i, r in enumerate(rewards)]
    return Group(group_id="b/t", batch="b", task_id="t", results=results, failed=failed)


def test_advantages_are_the_exports() -> None:
    g = _group([1.0, 0.0, 0.5, 0.5])
    assert g.advantages() == [0.5, -0.5, 0.0, 0.0]
    by_id = episode_advantages(g.results, normalize_std=True)
    assert g.advantages(normalize_std=True) == [by_id[r.workflow_id] for r in g.results]
    assert g.advantages(normalize_std=True)[0] == pytest.approx(0.5 / (0.4082483 + 1e-4))


def test_a_failed_or_partly_rewarded_group_has_no_advantages() -> None:
    assert _group([1.0, 0.0], failed="b.t.s1: worker_lost after 1 re-run(s)").advantages() == [
        None,
        None,
    ]
    assert _group([1.0, None]).advantages() == [None, None]


def test_groups_whose_members_all_scored_the_same_are_flagged() -> None:
    assert _group([1.0, 1.0, 1.0]).zero_variance
    assert _group([0.0, 0.0]).zero_variance
    assert not _group([1.0, 0.0]).zero_variance
    assert not _group([1.0, None]).zero_variance  # unknown: not flagged
    assert not _group([1.0, 1.0], failed="b.t.s1: worker_lost").zero_variance


async def test_samples_need_a_client() -> None:
    with pytest.raises(EpisodesError, match="not from a client"):
        await _group([1.0]).samples()


def test_dispatch_spec_sets_the_policy_version() -> None:
    s = spec(model={"base_url": "http://127.0.0.1:1/v1", "model": "m", "policy_version": 1})
    assert s.model is not None
    at = dispatch_spec(s, 4)
    assert at.model is not None and at.model.policy_version == 4
    assert s.model.policy_version == 1  # the trainer's spec is left as it was
    assert dispatch_spec(s, None) is s
    with pytest.raises(EpisodesError, match="has no `model`"):
        dispatch_spec(spec(), 2)
