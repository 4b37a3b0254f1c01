"""Counts in words, as people read them: `1 episode`, `2 episodes`, `1 batch`, `2 batches`.

One helper for every count label built from a number (the CLI's lines and tables, the
viewer's pages); the viewer's script has its twin (`plural` in
episodes/viewer/static/common.js). Standard library only.
"""

from __future__ import annotations


def plural(n: int, noun: str) -> str:
    """`n noun`, the noun in the plural unless n is 1 (-es after s, ch, sh, x)."""
    if n == 1:
        return f"{n} {noun}"
    return f"{n} {noun}{'es' if noun.endswith(('s', 'ch', 'sh', 'x')) else 's'}"
