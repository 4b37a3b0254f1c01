"""Training data from finished episodes: token-level samples, the groups they form,
their advantages, and their export.

    from episodes.training import advantages, whole_groups

- `samples`: one episode's model calls -> `Sample`s (prompt ids, completion ids, mask,
  logprobs), merged across calls while each prompt extends the last;
- `groups`: which groups are whole (every member has a result), the selection the
  export makes before any advantage;
- `estimators`: a group's advantages by a named estimator (`grpo`, `rloo`), and the
  one rule for a missing reward (the whole group gets none);
- `export`: a batch's samples as rows (reward, group advantage, replay divergences)
  in Parquet or JSONL.

No Temporal here: the CLI (`episodes export`) reads the histories and hands these
modules typed transcripts, so trainers can call them on transcripts they hold; the
CLI, `episodes.client.groups.Group` and the viewer's batch page call the same
functions.
"""

from episodes.training.estimators import (
    ESTIMATORS,
    Estimator,
    advantages,
    diverged,
    episode_advantages,
)
from episodes.training.groups import WholeGroups, whole_groups

__all__ = [
    "ESTIMATORS",
    "Estimator",
    "WholeGroups",
    "advantages",
    "diverged",
    "episode_advantages",
    "whole_groups",
]
