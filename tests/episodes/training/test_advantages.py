"""Advantages and whole groups: one rule, in `episodes.training`, that the export, the
viewer's batch page and `Group` all call."""

from __future__ import annotations

import pytest

from episodes.client.group.stream import Group
from episodes.training import ESTIMATORS, advantages, episode_advantages, whole_groups
from episodes.training.export import COLUMNS, export_rows
from episodes.training.samples import EpisodeSamples, Sample
from episodes.types.results import EpisodeResult
from episodes.viewer.stats import batch_stats


def _result(
    task: str, sample: int, reward: float | None, termination: str = "env_done"
) -> EpisodeResult:
    return EpisodeResult(
        workflow_id=f"b.{task}.s{sample}",
        task_id=task,
        sample=sample,
        env="e",
        spec_name="s",
        termination=termination,  # type: ignore[arg-type]
        turns=1,
        reward=reward,
        duration_s=1.0,
    )


def _samples() -> EpisodeSamples:
    one = Sample(
        index=0,
        prompt_ids=[1],
        completion_ids=[2],
        completion_mask=[1],
        completion_logprobs=[-0.5],
        num_model_calls=1,
        first_call=0,
    )
    return EpisodeSamples(samples=[one])


def _row(r: EpisodeResult) -> dict:
    """The viewer's visibility row of a finished episode."""
    return {
        "start": "2026-01-01T00:00:00+00:00",
        "id": r.workflow_id,
        "task": r.task_id,
        "sample": r.sample,
        "attempt": 0,
        "reward": r.reward,
        "termination": r.termination,
        "turns": r.turns,
        "duration_s": r.duration_s,
    }


def test_the_viewer_and_the_export_agree_on_a_group_missing_a_reward() -> None:
    """One member's env failed to score it (no reward): the export gives the group no
    advantage (a baseline over part of a group is biased); the viewer's batch page
    must show the same, not a mean over the members that have a reward."""
    results = [
        _result("a", 0, 1.0),
        _result("a", 1, 0.0),
        _result("a", 2, None, "env_error"),
        _result("b", 0, 1.0),
        _result("b", 1, 0.0),
    ]
    rows = export_rows("b", [(r, _samples()) for r in results])
    exported = {row["episode_id"]: row["advantage"] for row in rows}
    stats = batch_stats([_row(r) for r in results])
    viewed = {m["id"]: m["advantage"] for g in stats["groups"] for m in g["samples"]}
    assert viewed == exported
    assert exported == {
        "b.a.s0": None,
        "b.a.s1": None,
        "b.a.s2": None,
        "b.b.s0": 0.5,
        "b.b.s1": -0.5,
    }


def test_estimators_by_name() -> None:
    assert advantages([1.0, 0.0, 1.0, 0.0]) == [0.5, -0.5, 0.5, -0.5]
    # rloo: reward minus the mean of the others; n/(n-1) times grpo's.
    assert advantages([1.0, 0.0, 0.0], estimator="rloo") == pytest.approx([1.0, -0.5, -0.5])
    assert advantages([3.0], estimator="rloo") == [0.0]
    assert advantages([2.0, 2.0], normalize_std=True) == [0.0, 0.0]
    assert advantages([1.0, None], estimator="rloo") == [None, None]
    assert set(ESTIMATORS) == {"grpo", "rloo"}
    with pytest.raises(ValueError, match="grpo, rloo"):
        advantages([1.0], estimator="ppo")  # type: ignore[arg-type]


def test_whole_groups_keeps_the_groups_whose_every_member_ended() -> None:
    members = [("a", 1), ("b", None), ("a", 2), ("b", 3), ("c", None)]
    picked = whole_groups(members, group=lambda m: m[0], ended=lambda m: m[1] is not None)
    assert picked.whole == {"a": [("a", 1), ("a", 2)]}
    assert picked.partial == {"b": [("b", None)], "c": [("c", None)]}
    assert picked.members() == [("a", 1), ("a", 2)]


def test_replay_divergences_is_a_column_and_diverged_episodes_can_be_left_out() -> None:
    """A restarted episode whose replay diverged: its rows say so; left out, its reward
    is missing to its group (no advantage for the others), as any missing reward."""
    ok, bent = _result("a", 0, 1.0), _result("a", 1, 0.0)
    bent = bent.model_copy(update={"replay_divergences": 2})
    other = _result("b", 0, 1.0)
    eps = [(ok, _samples()), (bent, _samples()), (other, _samples())]
    rows = export_rows("b", eps)
    assert "replay_divergences" in COLUMNS
    assert [(r["episode_id"], r["replay_divergences"], r["advantage"]) for r in rows] == [
        ("b.a.s0", 0, 0.5),
        ("b.a.s1", 2, -0.5),
        ("b.b.s0", 0, 0.0),
    ]
    kept = export_rows("b", eps, include_diverged=False)
    assert [(r["episode_id"], r["advantage"]) for r in kept] == [("b.a.s0", None), ("b.b.s0", 0.0)]
    assert episode_advantages([ok, bent], include_diverged=False) == {
        "b.a.s0": None,
        "b.a.s1": None,
    }


async def test_a_group_leaves_its_diverged_members_samples_out() -> None:
    bent = _result("a", 1, 0.0).model_copy(update={"replay_divergences": 1})
    g = Group(group_id="b/a", batch="b", task_id="a", results=[_result("a", 0, 1.0), bent])
    g._samples = [_samples(), _samples()]  # as read back from history on first use
    assert g.diverged == ["b.a.s1"]
    assert g.advantages() == [0.5, -0.5]
    assert g.advantages(include_diverged=False) == [None, None]
    assert g.advantages(estimator="rloo") == [1.0, -1.0]
    assert [len(s.samples) for s in await g.samples()] == [1, 1]
    assert [len(s.samples) for s in await g.samples(include_diverged=False)] == [1, 0]


def test_each_row_carries_its_episodes_usage_and_cost() -> None:
    from episodes.types.cost import Cost, ModelUsage

    used = {
        "m": ModelUsage(calls=2, input_tokens=900, cached_tokens=300, output_tokens=80),
        "n": ModelUsage(calls=1, input_tokens=100, output_tokens=20, reasoning_tokens=5),
    }
    priced = _result("a", 0, 1.0).model_copy(
        update={"usage": used, "cost": Cost(model=0.25, box=0.5)}
    )
    plain = _result("a", 1, 0.0)
    rows = export_rows("b", [(priced, _samples()), (plain, _samples())])
    spent = [
        tuple(r[c] for c in COLUMNS if c.startswith("episode_") and c != "episode_id") for r in rows
    ]
    assert spent == [(1000, 300, 100, 5, 0.75), (0, 0, 0, 0, None)]
