"""`stream_chunks` (the proxy's parse of a whole streamed answer, issue 22) gives what the
general path gives (`parse_chunks(SseParser().feed(raw))`) on usual and unusual streams:
strings holding brackets, quotes and escapes, depth at and past the limit, payloads
that nest across events, comments, CRLFs, non-JSON payloads."""

from __future__ import annotations

import json
import random

import pytest

from episodes.json_depth import _shallow, text_depth
from episodes.model.stream import SseParser, parse_chunks, stream_chunks
from episodes.types.tuning import MAX_JSON_DEPTH


def _sse(*payloads: str, end: str = "\n\n") -> bytes:
    return "".join(f"data: {p}{end}" for p in payloads).encode()


def _chunk(content: str) -> str:
    return json.dumps({"choices": [{"index": 0, "delta": {"content": content}}]})


def _nested(depth: int) -> str:
    return "[" * (depth - 1) + "{}" + "]" * (depth - 1)


STREAMS = {
    "usual": _sse(*(_chunk(f" w{i}") for i in range(200)), "[DONE]"),
    "no [DONE]": _sse(*(_chunk(f" w{i}") for i in range(50))),
    "brackets in strings": _sse(*(_chunk("[{]}" * 40 + '"\\') for _ in range(10)), "[DONE]"),
    "escaped quotes and backslashes": _sse(_chunk('a\\"[[[' * 60), _chunk("\\\\" * 9), "[DONE]"),
    "at the limit": _sse(_nested(MAX_JSON_DEPTH), *(_chunk("x") for _ in range(60))),
    "past the limit": _sse(_nested(MAX_JSON_DEPTH + 1), *(_chunk("x") for _ in range(60))),
    "nesting across events": _sse(*(["[" * 100] * 50)),
    "closed across events": _sse("[" * 100, "[" * 100, "]" * 200, *(["{}"] * 100)),
    "split values": _sse("[1", "2],3", *(["{}"] * 100)),
    "not json": _sse(_chunk("a"), "not json", _chunk("b")),
    "[DONE] in the middle": _sse(_chunk("a"), "[DONE]", _chunk("b")),
    "comments": b": ping\n\n" + _sse(_chunk("a"), _chunk("b")),
    "crlf": _sse(_chunk("a"), _chunk("b"), end="\r\n\r\n"),
    "multi-line event": b'data: {"choices":\ndata: []}\n\n' + _sse(_chunk("c")),
    "bad utf-8": _sse(_chunk("a")) + b'data: {"x": "\xff"}\n\n',
    "unfinished last event": _sse(_chunk("a")) + b"data: {",
    "only [DONE]": _sse("[DONE]"),
    "empty": b"",
}


@pytest.mark.parametrize("name", list(STREAMS))
def test_stream_chunks_gives_what_the_general_path_gives(name):
    raw = STREAMS[name]
    assert stream_chunks(raw) == parse_chunks(SseParser().feed(raw))


def test_depth_past_the_limit_is_told_and_nothing_parsed():
    assert stream_chunks(STREAMS["past the limit"]) == ([], True)
    assert stream_chunks(STREAMS["nesting across events"])[0] == []
    chunks, too_deep = stream_chunks(STREAMS["at the limit"])
    assert not too_deep and len(chunks) == 60


def _tree(rng: random.Random, depth: int) -> object:
    if depth == 0 or rng.random() < 0.2:
        return rng.choice(["a", 'q"uote', "back\\slash", 7, None])
    if rng.random() < 0.5:
        return [_tree(rng, depth - 1) for _ in range(rng.randrange(0, 3))]
    return {f"k{i}": _tree(rng, depth - 1) for i in range(rng.randrange(0, 3))}


def test_shallow_is_exact_on_json_whose_strings_hold_no_brackets():
    rng = random.Random(22)
    for _ in range(2000):
        text = json.dumps(_tree(rng, rng.randrange(1, 9))).encode()
        for limit in (1, 2, 4, 6):
            assert _shallow(text, limit) == (text_depth(text) <= limit), (text, limit)


def test_shallow_never_calls_text_too_deep_shallow():
    """On any bytes at all: True only when `text_depth` agrees (else the general path)."""
    rng = random.Random(22)
    alphabet = ['"', "[", "]", "{", "}", "\\", "a", ","]
    for _ in range(5000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 40))).encode()
        for limit in (1, 2, 3, 5):
            if _shallow(text, limit) is True:
                assert text_depth(text) <= limit, (text, limit)
