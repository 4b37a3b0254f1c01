"""The reward-over-versions figure, with the version lag of the groups the trainer took
(matplotlib, from the `learn` extra)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot(summary: dict[str, Any], path: Path) -> bool:
    """Write the PNG; False when matplotlib is not installed (`pip install 'episodes[learn]'`)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rows = summary["versions"]
    xs = [r["policy_version"] for r in rows]
    ys = [r["mean_reward"] for r in rows]
    lags = summary.get("lag") or []
    fig, (ax, lag_ax) = plt.subplots(
        2, 1, figsize=(6, 5), dpi=120, sharex=True, gridspec_kw={"height_ratios": [2, 1]}
    )
    ax.plot(xs, ys, marker="o", label="mean reward of the version's episodes")
    if "random_play" in summary:
        ax.axhline(summary["random_play"], ls="--", c="grey", label="random play (expected)")
    if "bisection" in summary:
        ax.axhline(summary["bisection"], ls=":", c="green", label="bisection (expected)")
    ax.set_ylabel("mean reward")
    ax.set_ylim(0, 1)
    ax.set_title("guess-number, GRPO on recorded samples")
    ax.legend(loc="lower right", fontsize=8)
    lx = [r["trained_at"] for r in lags]
    lag_ax.plot(lx, [r["mean_lag"] for r in lags], marker="o", label="mean lag")
    lag_ax.plot(lx, [r["max_lag"] for r in lags], marker="^", ls="--", label="max lag")
    if "config" in summary:
        k = summary["config"].get("max_staleness")
        lag_ax.axhline(k, ls=":", c="grey", label=f"max_staleness ({k})")
    lag_ax.set_xlabel("policy version (the trainer's, when it took the groups)")
    lag_ax.set_ylabel("version lag")
    lag_ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True
