"""The reward-over-versions figure (matplotlib, from the `learn` extra)."""

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
    fig, ax = plt.subplots(figsize=(6, 3.2), dpi=120)
    ax.plot(xs, ys, marker="o", label="mean reward of the version's episodes")
    if "random_play" in summary:
        ax.axhline(summary["random_play"], ls="--", c="grey", label="random play (expected)")
    if "bisection" in summary:
        ax.axhline(summary["bisection"], ls=":", c="green", label="bisection (expected)")
    ax.set_xlabel("policy version")
    ax.set_ylabel("mean reward")
    ax.set_ylim(0, 1)
    ax.set_title("guess-number, GRPO on recorded samples")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True
