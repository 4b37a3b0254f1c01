"""The `episodes` command: one module per command group (`main` assembles them).

`priority` holds the options a batch's priority, fairness and budgets are given with
(`episodes run`, `episodes schedule create`).
"""

from episodes import _moved

# `episodes.cli.fleet` before "fleet" came to mean the model upstreams only.
_moved.alias(__name__, {"fleet": "episodes.cli.priority"})
