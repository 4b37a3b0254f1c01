"""How deeply JSON nests, measured without recursion (episodes/types/tuning.py: MAX_JSON_DEPTH).

Python's `json` parser recurses once per level: 5,000 levels of `[` raise RecursionError
(not the ValueError every caller handles), and a value that parses can still fail later
in Temporal's converter (~200 levels). So what untrusted programs send (a harness's
packets, an ACP agent's lines, a model upstream's answers, tool-call arguments) is
measured before it is parsed, by scans that cannot blow the stack themselves.
"""

from __future__ import annotations

from itertools import accumulate
from typing import Any

from episodes.types.tuning import MAX_JSON_DEPTH

_BRACKETS = b"[]{}"
_NOT_BRACKETS = bytes(b for b in range(256) if b not in _BRACKETS)
_STEP = [0] * 256
for _open in b"[{":
    _STEP[_open] = 1
for _close in b"]}":
    _STEP[_close] = -1


def text_depth(text: bytes | bytearray | str) -> int:
    """The deepest nesting of arrays and objects in JSON `text` (exact for valid JSON).

    Strings are cut out first, then the brackets left are summed as +1/-1, all in C
    loops (`bytes.replace`, `split`, `translate`, `accumulate`): a 16 MiB packet costs
    less than parsing it. Escapes go first: backslashes pair up left to right inside a
    string (`\\\\`), and a backslash left before a quote escapes it; the quotes left
    then alternate in and out of strings, so every other piece is outside them.
    """
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
    if b"\\" in data:
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    outside = b"".join(data.split(b'"')[::2])
    brackets = outside.translate(None, _NOT_BRACKETS)
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


def text_too_deep(text: bytes | bytearray | str, limit: int = MAX_JSON_DEPTH) -> bool:
    """True if JSON `text` nests deeper than `limit` (cheap when it has few brackets)."""
    if isinstance(text, str):
        opens = text.count("[") + text.count("{")
    else:
        opens = text.count(b"[") + text.count(b"{")
    return opens > limit and text_depth(text) > limit


def value_too_deep(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """True if a parsed value (dicts and lists) nests deeper than `limit`; iterative."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def too_deep_message(what: str, limit: int = MAX_JSON_DEPTH) -> str:
    """One line naming the limit, for every place that enforces it."""
    return f"{what} nests JSON deeper than {limit} levels (the limit, MAX_JSON_DEPTH)"
