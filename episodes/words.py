"""Counts in words, as people read them: `1 episode`, `2 episodes`, `1 batch`, `2 batches`;
and amounts of money (`usd`).

One helper for every count label built from a number (the CLI's lines and tables, the
viewer's pages); the viewer's script has its twin (`plural` in
episodes/viewer/static/common.js). Standard library only.
"""

from __future__ import annotations

import math


def plural(n: int, noun: str) -> str:
    """`n noun`, the noun in the plural unless n is 1 (-es after s, ch, sh, x)."""
    if n == 1:
        return f"{n} {noun}"
    return f"{n} {noun}{'es' if noun.endswith(('s', 'ch', 'sh', 'x')) else 's'}"


def usd(x: float) -> str:
    """An amount in US dollars as people read it: `$12.35` from a dollar up, else four
    significant digits (`$0.000297`: an episode's cost is often a fraction of a cent)."""
    if x == 0:
        return "$0"
    if abs(x) >= 1:
        return f"${x:,.2f}"
    decimals = min(12, 3 - math.floor(math.log10(abs(x))))  # four significant digits
    return "$" + f"{x:.{decimals}f}".rstrip("0").rstrip(".")
