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

_MARKS = b'"[]{}'
_NOT_MARKS = bytes(b for b in range(256) if b not in _MARKS)
_FOLD = bytes.maketrans(b"{}", b"[]")
_STEP = [0] * 256
for _open in b"[{":
    _STEP[_open] = 1
for _close in b"]}":
    _STEP[_close] = -1


def text_depth(text: bytes | bytearray | str) -> int:
    """The deepest nesting of arrays and objects in JSON `text` (exact for valid JSON).

    Escapes go first: backslashes pair up left to right inside a string (`\\\\`), and a
    backslash left before a quote escapes it. Then everything but quotes and brackets
    (`translate`): the quotes left alternate in and out of strings, so every other piece
    between them is outside, and its brackets are summed as +1/-1. All in C loops
    (`bytes.replace`, `translate`, `split`, `accumulate`): a 16 MiB packet costs less
    than parsing it.
    """
    return _depth(_marks(_bytes(text)))


def text_too_deep(text: bytes | bytearray | str, limit: int = MAX_JSON_DEPTH) -> bool:
    """True if JSON `text` nests deeper than `limit` (`text_depth`'s answer).

    From its quotes and brackets alone (`_marks`, one `translate`): cheap when it has
    few brackets (counted); else, for the usual text (no bracket in a string), answered
    from the brackets alone (`_within`) without cutting out the strings; measured as
    `text_depth` does when that cannot tell (or says too deep)."""
    marks = _marks(_bytes(text))
    if marks.count(b"[") + marks.count(b"{") <= limit:
        return False
    # A True from `_within` is exact on any bytes; a False only on valid JSON.
    return _within(marks, limit) is not True and _depth(marks) > limit


def _bytes(text: bytes | bytearray | str) -> bytes:
    return text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)


def _marks(data: bytes) -> bytes:
    """The quotes and brackets of `data`, escaped quotes (and escaped backslashes)
    dropped: all `text_depth` looks at, in order."""
    if b"\\" in data:
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    return data.translate(None, _NOT_MARKS)


def _depth(marks: bytes) -> int:
    outside = b"".join(marks.split(b'"')[::2])
    return max(accumulate(map(_STEP.__getitem__, outside)), default=0)


def _shallow(data: bytes, limit: int) -> bool | None:
    """`_within` on JSON `data` (for tests)."""
    return _within(_marks(data), limit)


def _within(marks: bytes, limit: int) -> bool | None:
    """Whether the text of `marks` nests no deeper than `limit` (as `text_depth`
    measures it), or None when a string of it may hold a bracket (or the brackets do
    not pair up): then ask `_depth`.

    Without a bracket in any string, the brackets outside strings are all the brackets:
    every string is an empty pair of quotes (the quotes pair up left to right as
    `count` finds `""`), and the brackets left nest as deep as the text does: innermost pairs removed per
    pass (`replace`: all the leaves of the tree they make), one pass per level."""
    if 2 * marks.count(b'""') != marks.count(b'"'):  # some quote is not in a `""` pair
        return None
    brackets = marks.translate(_FOLD, b'"')
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
