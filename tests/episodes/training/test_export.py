"""Export rows: group advantages, incomplete episodes left out, files as pandas reads them."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from episodes.errors import EpisodesError
from episodes.training import episode_advantages as advantages
from episodes.training.export import COLUMNS, check_out, export_rows, write_rows
from episodes.training.samples import EpisodeSamples, IncompleteCall, Sample
from episodes.types.results import EpisodeResult


def result(wid: str, task: str, reward: float | None) -> EpisodeResult:
    return EpisodeResult(
        workflow_id=wid,
        task_id=task,
        sample=int(wid[-1]),
        env="e",
        spec_name="s",
        termination="env_done",
        turns=1,
        reward=reward,
        duration_s=1.0,
    )


def samples(n: int = 1, incomplete: bool = False) -> EpisodeSamples:
    return EpisodeSamples(
        samples=[
            Sample(
                index=i,
                prompt_ids=[1, 2],
                completion_ids=[3, 4],
                completion_mask=[1, 0],
                completion_logprobs=[-0.5, 0.0],
                num_model_calls=1,
                first_call=i,
                split_reason=None if i == 0 else "prefix_mismatch at token 2",
            )
            for i in range(n)
        ],
        splits=n - 1,
        incomplete=[IncompleteCall(call=0, reason="no prompt ids")] if incomplete else [],
    )


def test_advantage_is_reward_minus_the_group_mean_and_null_for_a_group_missing_a_reward() -> None:
    rs = [result("a.s0", "a", 1.0), result("a.s1", "a", 0.0), result("b.s0", "b", None)]
    rs.append(result("b.s1", "b", 1.0))
    adv = advantages(rs, normalize_std=False)
    assert adv == {"a.s0": 0.5, "a.s1": -0.5, "b.s0": None, "b.s1": None}
    normed = advantages(rs[:2], normalize_std=True)
    assert normed["a.s0"] == pytest.approx(0.5 / (0.5**0.5 + 1e-4))
    assert advantages([result("c.s0", "c", 3.0)], normalize_std=True) == {"c.s0": 0.0}


def test_rows_leave_incomplete_episodes_out_but_count_them_in_the_group(tmp_path) -> None:
    eps = [
        (result("a.s0", "a", 1.0), samples(2)),
        (result("a.s1", "a", 0.0), samples(incomplete=True)),
    ]
    rows = export_rows("b", eps)
    assert [(r["episode_id"], r["sample_index"], r["advantage"]) for r in rows] == [
        ("a.s0", 0, 0.5),
        ("a.s0", 1, 0.5),
    ]
    assert rows[1]["split_reason"] == "prefix_mismatch at token 2"
    for name in ("x.parquet", "x.jsonl"):
        write_rows(rows, tmp_path / name)
    table = pq.read_table(tmp_path / "x.parquet")
    assert tuple(table.column_names) == COLUMNS
    assert table.to_pylist() == rows
    lines = (tmp_path / "x.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == rows
    # An empty export still has the columns and their types.
    write_rows([], tmp_path / "empty.parquet")
    assert tuple(pq.read_table(tmp_path / "empty.parquet").column_names) == COLUMNS
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.parquet", "x.jsonl", "x.parquet"]


def test_the_output_name_is_checked_before_any_work(tmp_path) -> None:
    with pytest.raises(EpisodesError, match=r"must end in .parquet or .jsonl"):
        check_out(tmp_path / "x.csv")
    with pytest.raises(EpisodesError, match=r"no directory"):
        check_out(tmp_path / "nope" / "x.jsonl")


def test_a_cut_episode_is_no_row_and_no_part_of_its_group() -> None:
    """A straggler a groups stream cut (`cut`, ended `cancelled`, no reward) is in no
    group: its samples are not rows, and the group's baseline is over the others."""
    cut = result("b.t.s2", "t", None).model_copy(
        update={"termination": "cancelled", "cut": "straggler"}
    )
    rows = export_rows(
        "b",
        [
            (result("b.t.s0", "t", 1.0), samples()),
            (result("b.t.s1", "t", 0.0), samples()),
            (cut, samples()),
        ],
    )
    assert [(r["episode_id"], r["advantage"]) for r in rows] == [("b.t.s0", 0.5), ("b.t.s1", -0.5)]
