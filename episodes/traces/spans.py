"""The spans a worker writes for an episode: provision, turns, model and tool calls, score.

Each helper is a no-op costing one test when traces are off (`enabled()`), and never
fails what it traces: a span that cannot be written is dropped with a log line.

- `provision_span`: the box and the harness coming up (`box started`, `harness ready`
  events), or a restore (`episodes.turns_replayed`).
- `turn_span`: one turn as it runs on this worker; a turn taken from the record (a
  retried drive, a restore's replay) has none.
- `call_span`: one model call (OpenTelemetry's `gen_ai.*` conventions) or tool call,
  written when the call is recorded, under the turn it belongs to. Calls replayed
  from the record are not written.
- `score_span`: the env's score, with the reward.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from typing import Any

from episodes.traces.setup import enabled

log = logging.getLogger("episodes.traces")

TRACER = "episodes"


class Span:
    """A span being written, or nothing (`OFF`): the callers need not know which."""

    def __init__(self, span: Any = None) -> None:
        self._span = span

    def set(self, key: str, value: Any) -> None:
        if self._span is not None and value is not None:
            self._span.set_attribute(key, value)

    def event(self, name: str, **attributes: Any) -> None:
        if self._span is not None:
            self._span.add_event(name, {k: v for k, v in attributes.items() if v is not None})

    def error(self, description: str) -> None:
        if self._span is not None:
            from opentelemetry.trace import Status, StatusCode

            self._span.set_status(Status(StatusCode.ERROR, description))

    @property
    def context(self) -> Any:
        """The OpenTelemetry context with this span current (None when off)."""
        if self._span is None:
            return None
        from opentelemetry import trace

        return trace.set_span_in_context(self._span)


OFF = Span()


@contextlib.contextmanager
def _span(name: str, attributes: dict[str, Any], parent: Any = None) -> Iterator[Span]:
    from opentelemetry import trace

    tracer = trace.get_tracer(TRACER)
    with tracer.start_as_current_span(
        name,
        context=parent,
        attributes={k: v for k, v in attributes.items() if v is not None},
        record_exception=True,
        set_status_on_exception=True,
    ) as span:
        yield Span(span)


@contextlib.contextmanager
def provision_span(session_id: str, *, restore: bool = False) -> Iterator[Span]:
    """Around a session's start (box, services, harness, env reset), or its restore."""
    if not enabled():
        yield OFF
        return
    name = "episodes.restore" if restore else "episodes.provision"
    with _span(name, {"episodes.session": session_id}) as span:
        yield span


@contextlib.contextmanager
def turn_span(session_id: str, turn: int) -> Iterator[Span]:
    """Around one turn the harness works on here (not one taken from the record)."""
    if not enabled():
        yield OFF
        return
    with _span(
        f"episodes.turn {turn}", {"episodes.session": session_id, "episodes.turn": turn}
    ) as span:
        yield span


@contextlib.contextmanager
def score_span(session_id: str) -> Iterator[Span]:
    if not enabled():
        yield OFF
        return
    with _span("episodes.score", {"episodes.session": session_id}) as span:
        yield span


def call_span(parent: Span, event: dict[str, Any], *, session_id: str) -> None:
    """Write one recorded call as a finished span under `parent` (its turn), ending now
    and lasting the call's recorded `ms`."""
    if not enabled() or not isinstance(event, dict):
        return
    try:
        kind = event.get("kind")
        if kind == "model_call":
            name, attributes = _model_call(event)
        elif kind == "tool_call":
            name, attributes = _tool_call(event)
        else:
            return
        attributes["episodes.session"] = session_id
        from opentelemetry import trace

        end = time.time_ns()
        ms = event.get("ms")
        start = end - int(float(ms) * 1e6) if isinstance(ms, (int, float)) and ms > 0 else end
        span = trace.get_tracer(TRACER).start_span(
            name,
            context=parent.context,
            kind=trace.SpanKind.CLIENT,
            attributes={k: v for k, v in attributes.items() if v is not None},
            start_time=start,
        )
        error = event.get("error")
        if error or (isinstance(event.get("status"), int) and event["status"] >= 400):
            span.set_status(trace.Status(trace.StatusCode.ERROR, str(error or event["status"])))
        span.end(end_time=end)
    except Exception:
        log.warning("traces: a call span could not be written", exc_info=True)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _model_call(event: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    request, response, usage = (_dict(event.get(k)) for k in ("request", "response", "usage"))
    model = request.get("model")
    choices = response.get("choices")
    choices = choices if isinstance(choices, list) else []
    reasons = [c.get("finish_reason") for c in choices if isinstance(c, dict)]
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    out_details = usage.get("completion_tokens_details")
    reasoning = out_details.get("reasoning_tokens") if isinstance(out_details, dict) else None
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": model,
        "gen_ai.response.model": response.get("model"),
        "gen_ai.response.id": response.get("id"),
        "gen_ai.response.finish_reasons": [r for r in reasons if isinstance(r, str)] or None,
        "gen_ai.usage.input_tokens": usage.get("prompt_tokens"),
        "gen_ai.usage.output_tokens": usage.get("completion_tokens"),
        "gen_ai.usage.cache_read.input_tokens": cached,
        "gen_ai.usage.reasoning.output_tokens": reasoning,
        "server.address": event.get("upstream"),
        "episodes.call.id": event.get("id"),
        "episodes.call.attempts": event.get("attempts"),
        "episodes.call.stream": event.get("stream"),
        "http.response.status_code": event.get("status"),
        "episodes.policy_version": event.get("policy_version"),
    }
    return (f"chat {model}" if model else "chat"), attributes


def _tool_call(event: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    name = event.get("name") or ""
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name or None,
    }
    return f"execute_tool {name}".strip(), attributes
