"""OpenTelemetry traces of episodes: one trace an episode, off unless `OTEL_*` asks.

An episode is a trace. The Temporal SDK's own interceptor
(`temporalio.contrib.opentelemetry.TracingInterceptor`) gives the workflow and its
activities; this package adds what only a worker sees: the provision (box start,
harness ready), each turn, each model call (`gen_ai.*` conventions) and tool call, and
the score. The trace id is derived from the workflow id (`trace_id_of`), so every run
of a chain, a restart on another worker and the trainer's own spans meet in one trace
that can be found from the id alone.

Off by default, at the cost of one boolean test per span site: nothing of
OpenTelemetry is imported. On when the standard variables ask for it
(`settings.tracing_requested`): `OTEL_EXPORTER_OTLP_ENDPOINT` or
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, or `OTEL_TRACES_EXPORTER=otlp|console`, and not
`OTEL_SDK_DISABLED=true`. docs/operations/metrics.md.

Replay-safe: a span is written when what it stands for happened on this worker. A
restore's replay of recorded turns writes none (they were traced when they ran), and
the SDK's interceptor writes no workflow span while a workflow task replays. A span is
exported only once it ends, so a worker that dies leaves no open span behind.
"""

from episodes.traces.context import episode_context, trace_id_of
from episodes.traces.settings import tracing_requested
from episodes.traces.setup import enabled, start_tracing, stop_tracing
from episodes.traces.spans import OFF, Span, call_span, provision_span, score_span, turn_span

__all__ = [
    "OFF",
    "Span",
    "call_span",
    "enabled",
    "episode_context",
    "provision_span",
    "score_span",
    "start_tracing",
    "stop_tracing",
    "trace_id_of",
    "tracing_requested",
    "turn_span",
]
