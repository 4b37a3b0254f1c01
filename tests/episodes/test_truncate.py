from episodes.truncate import MARKER, cap, cap_record, json_size
from episodes.types.results import TurnRecord


def test_small_values_pass_through_untouched() -> None:
    rec = TurnRecord(turn=0, message="hi", events=[{"a": 1}], reply={"ok": True})
    assert cap_record(rec, max_value_bytes=1024, max_turn_bytes=4096) is rec


def test_oversized_reply_becomes_a_marker_with_its_size() -> None:
    big = "x" * 50_000
    rec = TurnRecord(turn=3, message="m", reply=big)
    out = cap_record(rec, max_value_bytes=10_000, max_turn_bytes=100_000)
    assert out.reply[MARKER] is True
    assert out.reply["bytes"] == json_size(big) == 50_002
    assert out.reply["preview"] == big[:2000]
    assert out.message == "m"
    assert json_size(out.model_dump()) < 10_000


def test_events_past_the_turn_budget_are_dropped_and_counted() -> None:
    events = [{"i": i, "pad": "y" * 1000} for i in range(100)]
    rec = TurnRecord(turn=0, message="m", events=events, reply="r")
    out = cap_record(rec, max_value_bytes=10_000, max_turn_bytes=20_000)
    kept = [e for e in out.events if MARKER not in e]
    marker = out.events[-1]
    assert 10 <= len(kept) < 100
    assert kept == events[: len(kept)]
    assert marker["dropped_events"] == 100 - len(kept)
    assert marker["bytes"] == sum(json_size(e) for e in events[len(kept) :])
    assert json_size(out.model_dump()) < 25_000


def test_long_error_text_is_cut() -> None:
    rec = TurnRecord(turn=0, error="e" * 5000, error_type="harness_crashed")
    out = cap_record(rec, max_value_bytes=1024, max_turn_bytes=4096)
    assert len(out.error) < 1200 and "5000 chars" in out.error


def test_cap_keeps_fitting_values() -> None:
    assert cap([1, 2], 100) == ([1, 2], 5)  # "[1,2]": compact, as stored


def test_sizes_are_the_compact_utf8_json_the_budgets_charge_one_measure() -> None:
    """One measure for the record's caps and the session's event budget
    (episodes/model/fastjson.py used to keep its own, compact where this one padded)."""
    import json

    from episodes.model import fastjson

    event = {"kind": "model_call", "request": {"messages": [{"content": "héllo, wörld"}]}}
    compact = json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode()
    assert json_size(event) == len(compact)
    assert fastjson.encoded_size(event) == json_size(event)
    deep: object = "x"
    for _ in range(400):  # deeper than pydantic_core serialises: measured all the same
        deep = {"é": [deep]}
    text = json.dumps(deep, separators=(",", ":"), ensure_ascii=False).encode()
    assert json_size(deep) == fastjson.encoded_size(deep) == len(text)
