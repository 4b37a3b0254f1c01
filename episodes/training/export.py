"""A batch's samples as rows: one per sample, with the episode's reward and group advantage.

    rows = export_rows("b1", episodes, normalize_std=False)    # [(EpisodeResult, EpisodeSamples)]
    write_rows(rows, Path("b1.parquet"))                       # or .jsonl

`group_id` is the batch and the task id: the samples of one task in a batch (GRPO's
group). `advantage` = reward minus the group's mean reward; with `normalize_std`,
divided by the group's sample standard deviation (+1e-4, so equal rewards give 0,
not a division by zero). It is null for every member of a group in which any episode
has no reward (an env error, a lost worker): a baseline over part of the group would
be biased. Group members are the episodes given, incomplete ones included.

Parquet (pyarrow, `pip install 'episodes[train]'`) with an explicit schema, so the
file loads as it is in pandas and `datasets.load_dataset("parquet", data_files=...)`:
ids int32, mask int8, logprobs float64 (exactly what the upstream sent).
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from episodes.contract import group_id
from episodes.errors import EpisodesError
from episodes.training.samples import EpisodeSamples
from episodes.types.results import EpisodeResult

COLUMNS = (
    "batch",
    "episode_id",
    "task_id",
    "sample",
    "group_id",
    "sample_index",
    "policy_version",
    "reward",
    "advantage",
    "termination",
    "prompt_ids",
    "completion_ids",
    "completion_mask",
    "completion_logprobs",
    "num_model_calls",
    "split_reason",
)
FORMATS = (".parquet", ".jsonl")
STD_EPSILON = 1e-4

Episode = tuple[EpisodeResult, EpisodeSamples]


def check_out(path: Path) -> None:
    """Fail before any work when the output cannot be written."""
    if path.suffix not in FORMATS:
        raise EpisodesError(f"--out {path}: the file name must end in .parquet or .jsonl")
    if path.suffix == ".parquet":
        _pyarrow()
    if not path.parent.is_dir():
        raise EpisodesError(f"--out {path}: no directory {path.parent}")


def advantages(results: Sequence[EpisodeResult], *, normalize_std: bool) -> dict[str, float | None]:
    """Each episode's advantage within its task's group, by workflow id (see module doc)."""
    groups: dict[str, list[EpisodeResult]] = defaultdict(list)
    for r in results:
        groups[r.task_id].append(r)
    out: dict[str, float | None] = {}
    for members in groups.values():
        rewards = [m.reward for m in members]
        if any(r is None for r in rewards):
            out.update((m.workflow_id, None) for m in members)
            continue
        values = [float(r) for r in rewards if r is not None]
        mean = statistics.fmean(values)
        scale = 1.0
        if normalize_std:
            scale = (statistics.stdev(values) if len(values) > 1 else 0.0) + STD_EPSILON
        out.update(
            (m.workflow_id, (v - mean) / scale) for m, v in zip(members, values, strict=True)
        )
    return out


def export_rows(
    batch: str, episodes: Sequence[Episode], *, normalize_std: bool = False
) -> list[dict[str, Any]]:
    """One row per sample of every complete episode given, in the episodes' order; an
    episode a groups stream cut (`EpisodeResult.cut`) is in no group: never a row."""
    episodes = [e for e in episodes if e[0].cut is None]
    adv = advantages([r for r, _ in episodes], normalize_std=normalize_std)
    rows = []
    for result, built in episodes:
        if not built.complete:
            continue
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
                    "reward": result.reward,
                    "advantage": adv[result.workflow_id],
                    "termination": result.termination,
                    "prompt_ids": s.prompt_ids,
                    "completion_ids": s.completion_ids,
                    "completion_mask": s.completion_mask,
                    "completion_logprobs": s.completion_logprobs,
                    "num_model_calls": s.num_model_calls,
                    "split_reason": s.split_reason,
                }
            )
    return rows


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
            ("reward", pa.float64()),
            ("advantage", pa.float64()),
            ("termination", pa.string()),
            ("prompt_ids", ids),
            ("completion_ids", ids),
            ("completion_mask", pa.list_(pa.int8())),
            ("completion_logprobs", pa.list_(pa.float64())),
            ("num_model_calls", pa.int64()),
            ("split_reason", pa.string()),
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
