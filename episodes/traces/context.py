"""Which trace a span belongs to: the episode's, found from its workflow id.

`trace_id_of(workflow_id)` is a digest of the id, so a trace can be found from the
episode alone (the viewer and `episodes show` print it), and whatever starts or runs
an episode without a trace context of its own (a client that does not trace, a
schedule, an activity retried on another worker) still lands in the same trace. The
root is a remote parent nobody exports: the episode as a whole has no span, its runs,
activities and turns do. (Temporal-free: the session code imports it.)
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator

from episodes.traces.setup import enabled


def _ids(workflow_id: str) -> tuple[int, int]:
    digest = hashlib.sha256(f"episodes:{workflow_id}".encode()).digest()
    trace_id = int.from_bytes(digest[:16], "big") or 1
    span_id = int.from_bytes(digest[16:24], "big") or 1
    return trace_id, span_id


def trace_id_of(workflow_id: str) -> str:
    """The episode's trace id as OTLP viewers print it (32 hex digits)."""
    return f"{_ids(workflow_id)[0]:032x}"


@contextlib.contextmanager
def episode_context(workflow_id: str) -> Iterator[None]:
    """Within it, spans started with no parent of their own join the episode's trace.
    A span already current (the caller's own trace) wins; off: nothing happens."""
    if not enabled():
        yield
        return
    from opentelemetry import context, trace

    if trace.get_current_span().get_span_context().is_valid:
        yield
        return
    trace_id, span_id = _ids(workflow_id)
    root = trace.NonRecordingSpan(
        trace.SpanContext(
            trace_id,
            span_id,
            is_remote=True,
            trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
        )
    )
    token = context.attach(trace.set_span_in_context(root))
    try:
        yield
    finally:
        context.detach(token)
