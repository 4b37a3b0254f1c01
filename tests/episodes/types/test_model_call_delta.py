"""Model calls recorded as what they add to a conversation, and read back whole (issue 22)."""

from __future__ import annotations

from episodes.model.conversation import Conversations, common_prefix
from episodes.model.stream import chunks_of
from episodes.types.events import ModelCall
from episodes.types.results import Task, Transcript, TurnRecord


def _msgs(n: int) -> list[dict]:
    return [{"role": "user" if i % 2 else "system", "content": f"m{i}"} for i in range(n)]


def _record(conv: Conversations, messages: list[dict]) -> dict:
    call_id, own, extends = conv.record(messages)
    event = {"kind": "model_call", "id": call_id, "request": {"model": "m", "messages": own}}
    if extends is not None:
        event["extends"] = extends
    return event


def _transcript(*turns: list) -> Transcript:
    return Transcript(
        task=Task(id="t"), turns=[TurnRecord(turn=i, events=e) for i, e in enumerate(turns)]
    )


def test_common_prefix():
    assert common_prefix(_msgs(3), _msgs(5)) == 3
    assert common_prefix(_msgs(5), _msgs(3)) == 3
    assert common_prefix([], _msgs(2)) == 0
    other = _msgs(4)
    other[2] = {"role": "user", "content": "edited"}
    assert common_prefix(_msgs(4), other) == 2


def test_calls_record_what_they_add_and_read_back_whole_across_turns():
    conv = Conversations()
    sent = [_msgs(2), _msgs(4), _msgs(6), [*_msgs(1), {"role": "user", "content": "sum"}]]
    events = [_record(conv, m) for m in sent]
    assert [len(e["request"]["messages"]) for e in events] == [2, 2, 2, 1]
    assert events[3]["extends"] == {"id": events[2]["id"], "messages": 1}
    # Calls in different turns, among other events: references cross turns.
    transcript = _transcript([events[0], {"kind": "note"}], events[1:3], [events[3]])
    assert [c.messages for c in transcript.model_calls()] == sent
    typed = [e for e in transcript.typed_events() if isinstance(e, ModelCall)]
    assert [c.messages for c in typed] == sent
    # The record itself is untouched by reading it.
    assert len(transcript.turns[1].events[1]["request"]["messages"]) == 2


def test_a_call_extends_the_closest_of_the_recent_conversations():
    conv = Conversations()
    planner, worker = _msgs(6), [{"role": "system", "content": "worker"}, *_msgs(3)[1:]]
    events = [_record(conv, planner), _record(conv, worker), _record(conv, [*planner, *_msgs(1)])]
    assert events[2]["extends"] == {"id": events[0]["id"], "messages": 6}
    transcript = _transcript(events)
    assert transcript.model_calls()[2].messages == [*planner, *_msgs(1)]


def test_old_records_hold_their_whole_request_and_read_as_before():
    old = {"kind": "model_call", "request": {"messages": _msgs(3)}, "response": None}
    (call,) = _transcript([old]).model_calls()
    assert call.messages == _msgs(3) and call.messages_complete and call.id is None


def test_a_call_whose_base_was_not_kept_is_marked_incomplete():
    conv = Conversations()
    first, second = _record(conv, _msgs(2)), _record(conv, _msgs(4))
    capped = {"__truncated__": True, "bytes": 99999, "preview": "..."}
    (call,) = _transcript([capped, second]).model_calls()
    assert not call.messages_complete
    assert call.messages == _msgs(4)[2:]  # what it holds of its own
    assert first["id"] != second["id"]


def test_forget_starts_the_next_call_whole():
    conv = Conversations()
    _record(conv, _msgs(2))
    conv.forget()
    assert "extends" not in _record(conv, _msgs(4))


def test_each_session_names_its_calls_apart():
    a, b = Conversations(), Conversations()
    assert _record(a, _msgs(1))["id"] != _record(b, _msgs(1))["id"]


def test_stream_chunks_are_parsed_in_one_go_and_one_by_one_when_that_fails():
    payloads = ['{"a": 1}', "[DONE]", '{"b": [2]}']
    assert chunks_of(payloads) == [{"a": 1}, {"b": [2]}]
    # A payload that is not JSON on its own is skipped, the others kept.
    assert chunks_of(['{"a": 1}', "not json", '{"c": 3}']) == [{"a": 1}, {"c": 3}]
    # Two payloads that only make JSON together are not one chunk.
    assert chunks_of(['{"a": [1', "2]}"]) == []


def test_unclosed_brackets_across_payloads_do_not_add_up_to_a_recursion_error():
    # Each payload is within the depth limit alone; joined they would nest 5,000 deep.
    payloads = ["[" * 100 + "1"] * 50
    assert chunks_of(payloads) == []
