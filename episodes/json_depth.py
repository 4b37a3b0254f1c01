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
    """True if JSON `text` nests deeper than `limit` (`text_depth`'s answer).

    Cheap when it has few brackets (counted); else, for the usual text (no bracket in a
    string), answered from the brackets alone (`_shallow`) instead of cutting out every
    string; measured by `text_depth` when that cannot tell (or says too deep)."""
    if isinstance(text, str):
        if text.count("[") + text.count("{") <= limit:
            return False
        data = text.encode("utf-8", "surrogatepass")
    else:
        if text.count(b"[") + text.count(b"{") <= limit:
            return False
        data = bytes(text)
    # A True from `_shallow` is exact on any bytes; a False only on valid JSON.
    return _shallow(data, limit) is not True and text_depth(data) > limit


_MARKS = b'"[]{}'
_NOT_MARKS = bytes(b for b in range(256) if b not in _MARKS)
_FOLD = bytes.maketrans(b"{}", b"[]")


def _shallow(data: bytes, limit: int) -> bool | None:
    """Whether JSON `data` nests no deeper than `limit` (as `text_depth` measures it), or
    None when a string of it may hold a bracket (or the brackets do not pair up): then
    ask `text_depth`.

    Without a bracket in any string, the brackets outside strings are all the brackets:
    escapes are dropped (as `text_depth` does), then everything but quotes and brackets
    (`translate`); every string is then an empty pair of quotes (none left once `""`
    pairs are removed), and the brackets left nest as deep as the text does: innermost
    pairs removed per pass (`replace`: all the leaves of the tree they make), one pass
    per level."""
    if b"\\" in data:
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    marks = data.translate(None, _NOT_MARKS)
    if b'"' in marks.replace(b'""', b""):
        return None
    brackets = marks.replace(b'"', b"").translate(_FOLD)
    for _ in range(limit):
        if not brackets:
            return True
        fewer = brackets.replace(b"[]", b"")
        if len(fewer) == len(brackets):
            return None  # unbalanced: measured exactly
        brackets = fewer
    if not brackets:
        return True
    return False if b"[]" in brackets else None


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
