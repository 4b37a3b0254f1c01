"""Typed transcript events read the dicts histories hold today, old and new."""

from __future__ import annotations

from episodes.model.stream import assemble
from episodes.types.events import HarnessEvent, ModelCall, ToolCall
from episodes.types.results import Task, Transcript, TurnRecord


def _record(response, **extra):
    return {
        "kind": "model_call",
        "request": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        "response": response,
        "usage": (response or {}).get("usage") if isinstance(response, dict) else None,
        "ms": 3.5,
        "stream": False,
        "attempts": 1,
        "status": 200,
        **extra,
    }


VLLM = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "prompt_token_ids": [1, 2, 3],
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "ok"},
            "finish_reason": "stop",
            "token_ids": [7, 8],
            "logprobs": {
                "content": [
                    {"token": "token_id:7", "logprob": -0.5, "bytes": [], "top_logprobs": []},
                    {"token": "token_id:8", "logprob": -0.25, "bytes": [], "top_logprobs": []},
                ]
            },
        }
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5, "cached": 1},
}


def test_vllm_token_data_is_parsed_and_the_record_dumps_as_it_was() -> None:
    rec = _record(VLLM, policy_version=4, some_future_field={"x": 1})
    call = ModelCall.model_validate(rec)
    assert call.prompt_ids == [1, 2, 3]
    assert call.completion_ids == [7, 8]
    assert call.completion_logprobs == [-0.5, -0.25]
    assert call.finish_reason == "stop" and call.policy_version == 4
    assert call.usage is not None and call.usage.total_tokens == 5
    assert call.messages == [{"role": "user", "content": "hi"}]
    assert call.reply == {"role": "assistant", "content": "ok"}
    assert call.has_token_data and call.ok
    # Derived fields stay out of dumps; unknown fields are kept.
    dumped = call.model_dump()
    assert "prompt_ids" not in dumped and dumped["some_future_field"] == {"x": 1}
    assert ModelCall.model_validate(dumped).completion_ids == [7, 8]


def test_ids_come_from_token_id_strings_when_token_ids_are_absent() -> None:
    response = {
        **VLLM,
        "choices": [{k: v for k, v in VLLM["choices"][0].items() if k != "token_ids"}],
    }
    assert ModelCall.model_validate(_record(response)).completion_ids == [7, 8]


def test_a_streamed_call_folded_by_the_proxy_reads_alike() -> None:
    chunks = [
        {
            "id": "c",
            "prompt_token_ids": [1, 2, 3],
            "choices": [{"index": 0, "delta": {"role": "assistant"}}],
        },
        {
            "id": "c",
            "choices": [
                {
                    "index": 0,
                    "delta": {"content": "o"},
                    "token_ids": [7],
                    "logprobs": {"content": [{"token": "token_id:7", "logprob": -0.5}]},
                }
            ],
        },
        {
            "id": "c",
            "choices": [
                {
                    "index": 0,
                    "delta": {"content": "k"},
                    "token_ids": [8],
                    "logprobs": {"content": [{"token": "token_id:8", "logprob": -0.25}]},
                    "finish_reason": "stop",
                }
            ],
        },
    ]
    call = ModelCall.model_validate(_record(assemble(chunks), stream=True))
    assert (call.prompt_ids, call.completion_ids) == ([1, 2, 3], [7, 8])
    assert call.completion_logprobs == [-0.5, -0.25] and call.finish_reason == "stop"


def test_old_records_without_token_data_and_failed_calls_read() -> None:
    plain = {"choices": [{"index": 0, "message": {"content": "x"}, "finish_reason": "stop"}]}
    call = ModelCall.model_validate(_record(plain))
    assert call.prompt_ids is None and call.completion_ids is None and not call.has_token_data
    failed = ModelCall.model_validate(_record(None, status=502, error="gave up"))
    assert not failed.ok and failed.completion_ids is None and failed.usage is None
    text = ModelCall.model_validate(_record("bad request", status=400))
    assert not text.ok and text.reply is None


def test_misaligned_logprobs_are_named() -> None:
    choice = {**VLLM["choices"][0], "token_ids": [7, 8, 9]}
    call = ModelCall.model_validate(_record({**VLLM, "choices": [choice]}))
    assert call.token_data_problem == "2 logprobs for 3 sampled tokens"
    assert not call.has_token_data


def test_transcript_types_every_event_kind() -> None:
    events = [
        {"kind": "model_step", "step": 0, "content": ""},
        _record(VLLM),
        {"kind": "tool_call", "name": "put", "arguments": {"k": 1}, "result": "ok", "ms": 1.0},
        {"kind": "tool_call", "name": "boom", "arguments": {}, "error": "no", "ms": 1.0},
        "a plain string event",
    ]
    t = Transcript(task=Task(id="t"), turns=[TurnRecord(turn=0, events=events)])
    typed = t.typed_events()
    assert [type(e) for e in typed] == [HarnessEvent, ModelCall, ToolCall, ToolCall, HarnessEvent]
    assert isinstance(typed[0], HarnessEvent) and typed[0].kind == "model_step"
    assert isinstance(typed[4], HarnessEvent) and typed[4].data == "a plain string event"
    assert [c.completion_ids for c in t.model_calls()] == [[7, 8]]
    assert [(c.name, c.result, c.error) for c in t.tool_calls()] == [
        ("put", "ok", None),
        ("boom", None, "no"),
    ]
