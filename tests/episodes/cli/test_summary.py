"""`episodes run`'s summary counts the final attempt of each (task, sample), as every
batch figure does (`episodes.types.attempts`)."""

from __future__ import annotations

import re

from rich.console import Console

from episodes.cli.common import summary_table
from episodes.types.results import EpisodeResult


def _result(wid: str, termination: str, reward: float | None, retries: int = 0) -> EpisodeResult:
    return EpisodeResult(
        workflow_id=wid,
        task_id="t",
        sample=int(wid.split(".s")[1][0]),
        env="e",
        spec_name="s",
        termination=termination,
        turns=1,
        reward=reward,
        duration_s=1.0,
        retries=retries,
    )


def test_the_summary_counts_final_attempts() -> None:
    results = [
        _result("b.t.s0", "worker_lost", None),
        _result("b.t.s0.r1", "model_error", None),
        # The final attempt of sample 0, after two fresh re-runs (as run_batch says).
        _result("b.t.s0.r2", "env_done", 1.0, retries=2),
        _result("b.t.s1", "env_done", 0.0),
    ]
    console = Console(width=120, record=True)
    console.print(summary_table(results))
    text = re.sub(r"[ │┃]+", " ", console.export_text())
    assert " episodes 2 " in text and " mean reward 0.500 (over 2) " in text
    assert " env_done 2 " in text and "worker_lost" not in text
    assert " infrastructure failures 0 (after retries) " in text
    assert " retried as fresh episodes 2 " in text  # .r1 and .r2
    assert " zero-variance groups 0 of 1 " in text  # the final attempts scored 1.0 and 0.0


def test_the_summary_counts_zero_variance_groups() -> None:
    """A task whose samples all scored the same carries no GRPO signal; with one sample
    per task there are no groups to count."""
    same = [_result("b.t.s0", "env_done", 1.0), _result("b.t.s1", "env_done", 1.0)]
    console = Console(width=120, record=True)
    console.print(summary_table(same))
    console.print(summary_table(same[:1]))
    text = re.sub(r"[ │┃]+", " ", console.export_text())
    assert text.count("zero-variance groups") == 1
    assert " zero-variance groups 1 of 1 (all scored the same) " in text


def test_some_failed_episodes_get_a_line_of_their_own() -> None:
    from episodes.cli.run import exit_code, some_failed_lines

    ok = _result("b.t.s0", "env_done", 1.0)
    crashed = _result("b.t.s1", "harness_crashed", None).model_copy(
        update={"error": "harness exited during turn 2 (exit code 1): KeyError: 'x'\nmore"}
    )
    lines = some_failed_lines([ok, crashed, _result("b.t.s2", "cancelled", None)])
    assert lines == [
        "[bold yellow]1 of 3 episodes failed[/] (harness_crashed 1): "
        "`episodes show b.t.s1` shows one",
        "  first error: harness exited during turn 2 (exit code 1): KeyError: 'x'",
    ]
    assert exit_code([ok, crashed]) == 0  # a partial failure is not the run's failure
    assert some_failed_lines([ok]) == []
    # Every episode failed: that line is printed instead (and the exit code is 1).
    assert some_failed_lines([crashed]) == [] and exit_code([crashed]) == 1


def test_counts_take_the_noun_their_number_needs(monkeypatch) -> None:
    from episodes.cli import show
    from episodes.words import plural

    assert [plural(1, "episode"), plural(2, "batch"), plural(0, "split")] == [
        "1 episode",
        "2 batches",
        "0 splits",
    ]
    out = Console(width=120, record=True)
    monkeypatch.setattr(show, "console", out)
    record = {"turn": 0, "message": "hi", "events": [], "reply": "hi", "error": None}
    record["duration_ms"] = 1.0
    result = {"termination": "env_done", "turns": 1, "reward": 1.0, "duration_s": 1.2}
    show.print_transcript(
        {
            "turns": [{"record": record, "observation": {}}],
            "session": None,
            "result": {**result, "error": None},
        }
    )
    text = out.export_text()
    assert "env_done after 1 turn, reward 1.0, 1.20 s" in text, text


def test_the_summary_shows_usage_per_model_and_cost() -> None:
    from episodes.types.cost import Cost, ModelUsage

    used = {"m": ModelUsage(calls=2, input_tokens=900, cached_tokens=300, output_tokens=80)}
    priced = _result("b.t.s0", "env_done", 1.0).model_copy(
        update={"usage": used, "cost": Cost(model=0.0021, box=0.0004)}
    )
    unpriced = _result("b.t.s1", "env_done", 0.0)
    console = Console(width=160, record=True)
    console.print(summary_table([priced, unpriced]))
    text = re.sub(r"[ │┃]+", " ", console.export_text())
    assert " model m 2 calls: 900 in (300 cached), 80 out " in text
    assert " cost $0.0025 (models $0.0021, boxes $0.0004), 1 of 2 episodes priced " in text


def test_the_batch_table_shows_the_summed_cost() -> None:
    from episodes.cli.batch import metrics_table
    from episodes.types.cost import Cost
    from episodes.types.metrics import MetricsAccumulator

    acc = MetricsAccumulator()
    acc.add("t", "env_done", 1.0, 2.0, cost=Cost(model=0.5, box=0.25, unpriced=["x"]))
    acc.add("u", "env_done", 1.0, 2.0, cost=Cost(model=0.25))
    acc.add("v", "env_done", 1.0, 2.0)
    console = Console(width=160, record=True)
    console.print(metrics_table(acc.summary()))
    text = re.sub(r"[ │┃]+", " ", console.export_text())
    assert (
        " cost $1.00 (models $0.75, boxes $0.25), 2 of 3 episodes priced; no price for x " in text
    )
