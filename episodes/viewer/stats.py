"""A batch's figures from its episodes' visibility rows: pure, no Temporal.

The rows come from `episodes.viewer.visibility` (one per episode: task, sample,
termination, reward, turns, duration). What is computed here is what the batch page
shows: counts by termination and by side (whose failure it was), a reward histogram,
pass@k, per-task groups with advantages, duration and turn-count distributions, and
the figures with their intervals (`intervals`: `episodes.evals.summary`, over tasks).
Which groups are whole and their advantages are `episodes.training`'s, as the export
computes them (a group missing a reward shows none).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from datetime import datetime
from typing import Any, Literal

from episodes.evals.summary import Outcome, summarize
from episodes.training.estimators import advantages
from episodes.training.groups import whole_groups
from episodes.types.attempts import final_attempts
from episodes.types.metrics import pass_at_k, report_ks
from episodes.types.results import (
    AGENT_TERMINATIONS,
    ENV_TERMINATIONS,
    INFRA_TERMINATIONS,
    OK_TERMINATIONS,
)

Side = Literal["ok", "agent", "env", "infra", "other", "running"]

# Whose doing an outcome is: defined once, in the types floor (`episodes.types.results`).


def side(termination: str | None) -> Side:
    """Whose outcome `termination` is (None: the episode is still running)."""
    if termination is None:
        return "running"
    for name, group in (
        ("ok", OK_TERMINATIONS),
        ("agent", AGENT_TERMINATIONS),
        ("env", ENV_TERMINATIONS),
        ("infra", INFRA_TERMINATIONS),
    ):
        if termination in group:
            return name  # type: ignore[return-value]
    return "other"  # cancelled, or a termination newer than this viewer


def histogram(values: list[float], bins: int = 10, *, integers: bool = False) -> dict[str, Any]:
    """Equal-width bins over [min, max]. `integers` (turn counts): whole-number bins,
    one per value while they are few, each labelled by the values it holds (`labels`:
    "1", or "10-14"), so every episode with 1 turn reads 1, never 1..2."""
    if not values:
        return {"edges": [], "counts": [], **({"labels": []} if integers else {})}
    if integers:
        return _integer_histogram([math.floor(v) for v in values], bins)
    lo, hi = min(values), max(values)
    if hi == lo:
        edges = [lo, lo]
    else:
        if 0.0 <= lo and hi <= 1.0:  # rewards: keep the unit interval
            lo, hi = 0.0, 1.0
        step = (hi - lo) / bins
        edges = [lo + i * step for i in range(bins + 1)]
    counts = [0] * max(1, len(edges) - 1)
    for v in values:
        if edges[-1] == edges[0]:
            counts[0] += 1
            continue
        i = int((v - edges[0]) / (edges[-1] - edges[0]) * (len(edges) - 1))
        counts[min(max(i, 0), len(counts) - 1)] += 1
    return {"edges": edges, "counts": counts}


def _integer_histogram(values: list[int], bins: int) -> dict[str, Any]:
    lo, hi = min(values), max(values)
    span = hi - lo + 1
    width = 1 if span <= 2 * bins else math.ceil(span / bins)
    n = math.ceil(span / width)
    counts = [0] * n
    for v in values:
        counts[(v - lo) // width] += 1
    starts = [lo + i * width for i in range(n)]
    labels = [str(a) if width == 1 else f"{a}-{a + width - 1}" for a in starts]
    return {
        "edges": [float(a) for a in [*starts, lo + n * width]],
        "counts": counts,
        "labels": labels,
    }


def _quantiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p90": None, "max": None, "mean": None}
    ordered = sorted(values)

    def at(q: float) -> float:
        return ordered[max(0, math.ceil(q * len(ordered)) - 1)]

    return {"p50": at(0.5), "p90": at(0.9), "max": ordered[-1], "mean": statistics.fmean(values)}


def latest_attempts(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (task, sample): its final attempt (`episodes.types.attempts`), so a
    re-run's newer episode replaces the attempts that failed before it."""
    return final_attempts(rows, workflow_id=lambda r: r["id"], started=_started)


def _started(row: dict[str, Any]) -> datetime | None:
    return datetime.fromisoformat(row["start"]) if row.get("start") else None


def outcomes(rows: list[dict[str, Any]]) -> list[Outcome]:
    """The rows as the eval statistics read them (`episodes.evals.summary`)."""
    return [Outcome(r.get("task") or "?", r.get("reward"), r.get("termination")) for r in rows]


def batch_stats(rows: list[dict[str, Any]], threshold: float = 1.0) -> dict[str, Any]:
    """The batch page's figures; sets `advantage` (`episodes.training.advantages`), `side`
    and `final` (whether it is its (task, sample)'s final attempt) on each row in place."""
    final = latest_attempts(rows)
    picked = whole_groups(
        final,
        group=lambda r: r.get("task") or "?",
        ended=lambda r: r.get("termination") is not None,
    )
    by_task: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in final:
        by_task[r.get("task") or "?"].append(r)
    terminations: dict[str, int] = defaultdict(int)
    sides: dict[str, int] = defaultdict(int)
    finals = {id(r) for r in final}
    for r in rows:
        r["side"] = side(r.get("termination"))
        r["final"] = id(r) in finals  # False: a later attempt replaced it in the figures
    for r in final:
        terminations[r.get("termination") or "running"] += 1
        sides[r["side"]] += 1
    groups = []
    tallies: list[tuple[int, int]] = []
    for task, members in sorted(by_task.items()):
        members.sort(key=lambda m: m.get("sample") or 0)
        rewards = [m["reward"] for m in members if m.get("reward") is not None]
        mean = statistics.fmean(rewards) if rewards else None
        whole = task in picked.whole  # one still running: no advantage yet
        adv = advantages([m.get("reward") for m in members]) if whole else [None] * len(members)
        for m, a in zip(members, adv, strict=True):
            m["advantage"] = a
        done = [m for m in members if m.get("termination") is not None]
        passed = sum(1 for m in done if m.get("reward") is not None and m["reward"] >= threshold)
        if done:
            tallies.append((len(done), passed))
        groups.append(
            {
                "task": task,
                "mean_reward": mean,
                "passed": passed,
                "done": len(done),
                "samples": [
                    {k: m.get(k) for k in ("id", "sample", "reward", "advantage", "termination")}
                    for m in members
                ],
            }
        )
    pass_at: dict[int, float] = {}
    most = max((n for n, _ in tallies), default=0)
    for k in report_ks(range(1, most + 1)):
        values = [pass_at_k(n, c, k) for n, c in tallies if n >= k]
        if values:
            pass_at[k] = statistics.fmean(values)
    rewards = [r["reward"] for r in final if r.get("reward") is not None]
    durations = [r["duration_s"] for r in final if r.get("duration_s") is not None]
    turns = [float(r["turns"]) for r in final if r.get("turns") is not None]
    return {
        "episodes": len(final),
        "attempts": len(rows),
        "running": sides.get("running", 0),
        "terminations": dict(sorted(terminations.items(), key=lambda kv: -kv[1])),
        "sides": dict(sides),
        "mean_reward": statistics.fmean(rewards) if rewards else None,
        "rewarded": len(rewards),
        "threshold": threshold,
        "pass_at_k": pass_at,
        "intervals": summarize(outcomes(final), threshold).as_dict(),
        "reward_histogram": histogram(rewards),
        "duration_s": {**_quantiles(durations), "histogram": histogram(durations)},
        "turns": {**_quantiles(turns), "histogram": histogram(turns, integers=True)},
        "groups": groups,
    }
