"""The training-export benchmark runs (tiny sizes), so it cannot rot unnoticed."""

from __future__ import annotations

from bench import training_export


async def test_training_export_bench_runs() -> None:
    result = await training_export.run(quick=True)
    assert set(result["figures"]) == {"typed", "samples", "parquet", "jsonl", "total_parquet"}
    assert result["mb_per_1000"]["parquet"] > 0


def test_the_synthetic_episode_is_one_merged_sample_of_the_stated_size() -> None:
    from episodes.training.samples import build_samples

    t = training_export
    (s,) = build_samples(t.transcript(3).model_calls()).samples
    assert len(s.prompt_ids) == t.PROMPT
    assert len(s.completion_ids) == t.CALLS * t.COMPLETION + (t.CALLS - 1) * t.GAP
    assert sum(s.completion_mask) == t.CALLS * t.COMPLETION
