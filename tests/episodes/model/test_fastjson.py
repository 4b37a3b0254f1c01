"""The proxy's per-call JSON (episodes/model/fastjson.py, the `raw` decision of a call's
record): faster paths that must give exactly what the standard library gave."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from episodes.model.fastjson import dumps, encoded_size, loads
from episodes.replay import raw_to_record

values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


def _same(text: bytes) -> None:
    try:
        want: Any = ("ok", json.loads(text))
    except ValueError as e:
        want = ("error", type(e))
    try:
        got: Any = ("ok", loads(text))
    except ValueError as e:
        got = ("error", type(e))
    assert repr(got) == repr(want)  # NaN included; 1 and 1.0 told apart


@given(values)
def test_loads_gives_what_json_loads_gives(value: Any) -> None:
    for text in (json.dumps(value), json.dumps(value, ensure_ascii=False, indent=1)):
        _same(text.encode("utf-8", "surrogatepass"))


@given(values)
def test_dumps_gives_what_json_dumps_gives_once_read(value: Any) -> None:
    assert json.loads(dumps(value)) == json.loads(json.dumps(value))


def test_dumps_writes_what_to_json_refuses_as_json_dumps_does() -> None:
    for value in (
        {"content": "x\ud800"},  # a lone surrogate, as json.loads lets through
        {"temperature": float("nan"), "top_p": float("inf")},
        {"n": 2**70},
    ):
        assert repr(json.loads(dumps(value))) == repr(json.loads(json.dumps(value)))
    deep: Any = []
    for _ in range(400):  # deeper than pydantic_core recurses
        deep = [deep]
    assert json.loads(dumps(deep)) == deep


def test_loads_leaves_what_jiter_refuses_to_json_loads() -> None:
    for text in (
        b'"\\ud800"',  # a lone surrogate: json.loads takes it
        '{"a": 1}'.encode("utf-16"),  # detected by json.loads, not by jiter
        b'\xef\xbb\xbf{"a": 1}',  # a byte-order mark
        b'{"a": 1,}',
        b"\xff",
        b"[1, 2] x",
        b"NaN",
    ):
        _same(text)


def test_encoded_size_is_the_compact_utf8_length() -> None:
    event = {"kind": "model_call", "request": {"messages": [{"content": "héllo, wörld"}]}}
    compact = json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode()
    assert encoded_size(event) == len(compact)
    assert encoded_size({"odd": object()}) > 0  # anything else measured by its str()


def test_a_plain_answer_keeps_its_bytes_unless_json_dumps_gives_them_back() -> None:
    response = {"id": "x", "choices": [{"message": {"content": "é, ok: 1"}}], "n": 1.5e-7}
    assert raw_to_record(json.dumps(response).encode(), response, stream=False) is None
    assert raw_to_record(b"{}", {}, stream=False) is None
    for raw in (
        json.dumps(response, separators=(",", ":")),  # vLLM's (compact)
        json.dumps(response, indent=2),  # pretty-printed
        json.dumps(response, ensure_ascii=False),  # UTF-8 text
        json.dumps(response).replace("1.5e-07", "1.5e-7"),  # another float spelling
    ):
        assert raw_to_record(raw.encode(), response, stream=False) == raw


texts = st.text(alphabet=st.sampled_from(list(', :"\\x\x7f\n{}[]é0e')), max_size=12) | st.text(
    max_size=3
)
awkward = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.sampled_from([1e-5, 1e16, 0.0001, 1.5e-7, -0.0, 10.00001, 1e300])
    | texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=25,
)


@given(st.dictionaries(texts, awkward, max_size=5) | st.lists(awkward, max_size=5), st.data())
def test_raw_is_kept_exactly_when_json_dumps_does_not_give_it_back(value: Any, data: Any) -> None:
    canonical = json.dumps(value)
    spellings = [
        canonical,
        json.dumps(value, separators=(",", ":")),
        json.dumps(value, separators=(", ", ":")),
        json.dumps(value, ensure_ascii=False),
        json.dumps(value, indent=1),
        canonical.replace(", ", ",  ", 1),
        canonical.replace(": ", ":", 1),
        canonical.replace(", ", ",", 1).replace(": ", ":  ", 1),
        canonical.replace("e-0", "e-", 1),
        canonical + " ",
        " " + canonical,
    ]
    at = data.draw(st.integers(0, len(canonical)))
    spellings.append(canonical[:at] + " " + canonical[at:])
    for text in spellings:
        raw = text.encode()
        try:
            parsed = loads(raw)
        except ValueError:
            continue
        kept = None if raw == json.dumps(parsed).encode() else text
        assert raw_to_record(raw, parsed, stream=False) == kept, text
