"""A batch's samples as rows: one per sample, with the episode's reward and group advantage.

    rows = export_rows("b1", episodes)          # [(EpisodeResult, EpisodeSamples)]
    write_rows(rows, Path("b1.parquet"))        # or .jsonl

`group_id` is the batch and the task id: the samples of one task in a batch (GRPO's
group). `advantage` is the episode's within its group by the estimator asked
(`episodes.training.estimators`: `grpo`, reward minus the group's mean, by default;
`normalize_std` divides by the group's std): null for every member of a group in which
any episode has no reward (an env error, a lost worker), the one rule for a missing
reward. Group members are the episodes given, incomplete ones included (the caller
picks whole groups: `episodes.training.groups`).

Policy versions (`episodes.training.samples`): `policy_version` is the version the
episode was dispatched at; `completion_policy_versions` (aligned with
`completion_ids`) the version of the weights that served each token's call, null when
no version was known; `min_policy_version` / `max_policy_version` span the versions
that sampled the row's mask-1 tokens. Files written before these columns existed
simply lack them.

`replay_divergences` is on every row: the episode's replayed turns whose request
differed from the recorded one (a restart, resume or fork; 0 for most). With
`include_diverged=False` an episode with any is left out, and its reward counts as
missing in its group's advantages (`episodes.training.estimators`).

`episode_*_tokens` and `episode_cost` are the episode's (`EpisodeResult.usage`, summed
over its models, and `.cost`; 0 and null in results from before they were kept),
repeated on each of its rows: sum them over one row per episode, never over rows.

Parquet (pyarrow, `pip install 'episodes[train]'`) with an explicit schema, so the
file loads as it is in pandas and `datasets.load_dataset("parquet", data_files=...)`:
ids int32, mask int8, logprobs float64 (exactly what the upstream sent).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from episodes.contract import group_id
from episodes.errors import EpisodesError
from episodes.training.estimators import Estimator, diverged, episode_advantages
from episodes.training.samples import EpisodeSamples
from episodes.types.cost import merge_usage
from episodes.types.results import EpisodeResult

COLUMNS = (
    "batch",
    "episode_id",
    "task_id",
    "sample",
    "group_id",
    "sample_index",
    "policy_version",
    "min_policy_version",
    "max_policy_version",
    "reward",
    "advantage",
    "termination",
    "prompt_ids",
    "completion_ids",
    "completion_mask",
    "completion_logprobs",
    "completion_policy_versions",
    "num_model_calls",
    "split_reason",
    "replay_divergences",
    "episode_input_tokens",
    "episode_cached_tokens",
    "episode_output_tokens",
    "episode_reasoning_tokens",
    "episode_cost",
)
FORMATS = (".parquet", ".jsonl")

Episode = tuple[EpisodeResult, EpisodeSamples]


def check_out(path: Path) -> None:
    """Fail before any work when the output cannot be written."""
    if path.suffix not in FORMATS:
        raise EpisodesError(f"--out {path}: the file name must end in .parquet or .jsonl")
    if path.suffix == ".parquet":
        _pyarrow()
    if not path.parent.is_dir():
        raise EpisodesError(f"--out {path}: no directory {path.parent}")


def export_rows(
    batch: str,
    episodes: Sequence[Episode],
    *,
    normalize_std: bool = False,
    estimator: Estimator = "grpo",
    include_diverged: bool = True,
) -> list[dict[str, Any]]:
    """One row per sample of every complete episode given, in the episodes' order; an
    episode a groups stream cut (`EpisodeResult.cut`) is in no group: never a row.
    `include_diverged=False`: no row of an episode whose replay diverged (see the
    module doc)."""
    episodes = [e for e in episodes if e[0].cut is None]
    adv = episode_advantages(
        [r for r, _ in episodes],
        estimator=estimator,
        normalize_std=normalize_std,
        include_diverged=include_diverged,
    )
    rows = []
    for result, built in episodes:
        if not built.complete or (not include_diverged and diverged(result)):
            continue
        spent = _spent(result)
        for s in built.samples:
            rows.append(
                {
                    "batch": batch,
                    "episode_id": result.workflow_id,
                    "task_id": result.task_id,
                    "sample": result.sample,
                    "group_id": group_id(batch, result.task_id),
                    "sample_index": s.index,
                    "policy_version": s.policy_version,
                    "min_policy_version": s.min_policy_version,
                    "max_policy_version": s.max_policy_version,
                    "reward": result.reward,
                    "advantage": adv[result.workflow_id],
                    "termination": result.termination,
                    "prompt_ids": s.prompt_ids,
                    "completion_ids": s.completion_ids,
                    "completion_mask": s.completion_mask,
                    "completion_logprobs": s.completion_logprobs,
                    "completion_policy_versions": s.completion_policy_versions,
                    "num_model_calls": s.num_model_calls,
                    "split_reason": s.split_reason,
                    "replay_divergences": result.replay_divergences,
                    **spent,
                }
            )
    return rows


def _spent(result: EpisodeResult) -> dict[str, Any]:
    """The episode's tokens over every model, as the upstream reported them, and its
    cost under the spec's `prices` (None without one): the same on each of its rows."""
    usage = merge_usage(result.usage).values()
    return {
        "episode_input_tokens": sum(u.input_tokens for u in usage),
        "episode_cached_tokens": sum(u.cached_tokens for u in usage),
        "episode_output_tokens": sum(u.output_tokens for u in usage),
        "episode_reasoning_tokens": sum(u.reasoning_tokens for u in usage),
        "episode_cost": result.cost.total if result.cost is not None else None,
    }


def write_rows(rows: list[dict[str, Any]], path: Path) -> None:
    """Parquet or JSONL by the file's suffix; written to a temporary name, then renamed,
    so a failed export never leaves a half-written file under the asked name."""
    tmp = path.with_name(f".{path.name}.partial")
    if path.suffix == ".parquet":
        pa, pq = _pyarrow()
        pq.write_table(pa.Table.from_pylist(rows, schema=_schema(pa)), tmp)
    else:
        with tmp.open("w") as sink:
            for row in rows:
                sink.write(json.dumps(row) + "\n")
    tmp.replace(path)


def _schema(pa: Any) -> Any:
    ids = pa.list_(pa.int32())
    return pa.schema(
        [
            ("batch", pa.string()),
            ("episode_id", pa.string()),
            ("task_id", pa.string()),
            ("sample", pa.int64()),
            ("group_id", pa.string()),
            ("sample_index", pa.int64()),
            ("policy_version", pa.int64()),
            ("min_policy_version", pa.int64()),
            ("max_policy_version", pa.int64()),
            ("reward", pa.float64()),
            ("advantage", pa.float64()),
            ("termination", pa.string()),
            ("prompt_ids", ids),
            ("completion_ids", ids),
            ("completion_mask", pa.list_(pa.int8())),
            ("completion_logprobs", pa.list_(pa.float64())),
            ("completion_policy_versions", pa.list_(pa.int64())),
            ("num_model_calls", pa.int64()),
            ("split_reason", pa.string()),
            ("replay_divergences", pa.int64()),
            ("episode_input_tokens", pa.int64()),
            ("episode_cached_tokens", pa.int64()),
            ("episode_output_tokens", pa.int64()),
            ("episode_reasoning_tokens", pa.int64()),
            ("episode_cost", pa.float64()),
        ]
    )


def _pyarrow() -> tuple[Any, Any]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise EpisodesError(
            "Parquet needs pyarrow: pip install 'episodes[train]' (or write .jsonl)"
        ) from None
    return pa, pq
