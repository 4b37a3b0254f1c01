"""How `episodes show` renders a recorded model call: tokens for one that answered, the
recorded cause for one that failed (it used to say `HTTP 502: ?+? tokens, null`)."""

from __future__ import annotations

from episodes.cli.show import _fmt_event


def test_a_failed_call_shows_its_recorded_cause() -> None:
    cause = "model call failed after 3 attempt(s): upstream unreachable (connect) on 2 upstreams"
    event = {
        "kind": "model_call",
        "request": {"model": "m"},
        "response": {"error": {"message": cause, "type": "upstream_error", "code": "model_error"}},
        "usage": None,
        "status": 502,
        "ms": 12.0,
    }
    line = _fmt_event(event)
    assert f"HTTP 502[/]: {cause}" in line, line
    assert "?+?" not in line and "null" not in line


def test_an_answered_call_shows_its_tokens() -> None:
    event = {
        "kind": "model_call",
        "request": {"model": "m"},
        "response": {"choices": [{"message": {"content": "hi"}}]},
        "usage": {"prompt_tokens": 3, "completion_tokens": 1},
        "status": 200,
        "ms": 5.0,
    }
    assert "3+1 tokens, hi" in _fmt_event(event)
