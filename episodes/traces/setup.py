"""Turning traces on in a process: the tracer provider, its exporter, the interceptors.

`start_tracing(service)` is called once by each entry point (the worker, `episodes
dev`, a client's `connect`); it does nothing unless the environment asks for traces
(`settings`), and then installs an SDK tracer provider exporting over OTLP (HTTP or
gRPC) in batches. A process whose own code already installed an SDK provider (a
trainer tracing itself) keeps it: our spans join its pipeline.

The interceptors a traced client and its workers run with are in
`episodes.traces.interceptor` (Temporal-facing; this module is not).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from episodes.traces.settings import TracingConfigError, exporter_of, protocol_of

log = logging.getLogger("episodes.traces")

_provider: Any = None  # the SDK TracerProvider in use once on
_owned = False  # whether this package installed it (and so shuts it down)


# Instrumentation scopes whose spans are not exported. The MCP SDKs (mcp, fastmcp) trace every
# JSON-RPC message of the tool bridge on their own: their spans would repeat each tool
# call (`execute_tool` spans stand for them, under their turn), hang the calls of a
# session's first turns under its provision (where the bridge's server task began),
# and be written again for the calls a restore replays from the record.
LEFT_OUT = frozenset({"mcp-python-sdk", "fastmcp"})


def _without(inner: Any, scopes: frozenset[str]) -> Any:
    """A span processor passing on to `inner` every span but those of `scopes`."""
    from opentelemetry.sdk.trace import SpanProcessor

    def kept(span: Any) -> bool:
        scope = getattr(span, "instrumentation_scope", None)
        return scope is None or scope.name not in scopes

    class Without(SpanProcessor):
        def on_start(self, span: Any, parent_context: Any = None) -> None:
            if kept(span):
                inner.on_start(span, parent_context=parent_context)

        def on_end(self, span: Any) -> None:
            if kept(span):
                inner.on_end(span)

        def shutdown(self) -> None:
            inner.shutdown()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return bool(inner.force_flush(timeout_millis))

    return Without()


def enabled() -> bool:
    """Whether spans are being written in this process (the one test each site makes)."""
    return _provider is not None


def _exporter(environ: Mapping[str, str]) -> Any:
    kind = exporter_of(environ)
    if kind == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if protocol_of(environ) == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (  # type: ignore[import-not-found]
                OTLPSpanExporter,
            )
        except ImportError:
            raise TracingConfigError(
                "OTEL_EXPORTER_OTLP_PROTOCOL=grpc needs opentelemetry-exporter-otlp-proto-grpc"
                " installed (or use http/protobuf)"
            ) from None
        return OTLPSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()  # endpoint, headers, timeout: from OTEL_* itself


def start_tracing(
    service: str, *, instance: str | None = None, environ: Mapping[str, str] | None = None
) -> bool:
    """Turn traces on for this process if the environment asks (idempotent); whether on.

    `service` names the process when `OTEL_SERVICE_NAME` does not; `instance` (a
    worker's id) becomes `service.instance.id`. A bad setting, or OpenTelemetry not
    installed, is a one-line `TracingConfigError`."""
    global _provider, _owned
    env = os.environ if environ is None else environ
    if _provider is not None:
        return True
    if exporter_of(env) is None:
        return False
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        raise TracingConfigError(
            "traces are asked for (OTEL_*) but OpenTelemetry is not installed: "
            "pip install 'episodes[otel]'"
        ) from None
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        _provider, _owned = current, False  # the process's own pipeline
        return True
    attributes: dict[str, str] = {}
    if not env.get("OTEL_SERVICE_NAME"):
        attributes["service.name"] = service
    if instance:
        attributes["service.instance.id"] = instance
    provider = TracerProvider(resource=Resource.create(attributes))
    provider.add_span_processor(_without(BatchSpanProcessor(_exporter(env)), LEFT_OUT))
    trace.set_tracer_provider(provider)
    _provider, _owned = provider, True
    log.info("traces on: %s spans of %s", exporter_of(env), service)
    return True


def stop_tracing() -> None:
    """Send what is buffered and stop (a worker's clean exit); a no-op when off."""
    global _provider, _owned
    if _provider is None:
        return
    try:
        _provider.force_flush()
        if _owned:
            _provider.shutdown()
    except Exception:  # an unreachable collector must not fail an exit
        log.warning("traces: flushing at exit failed", exc_info=True)
    _provider, _owned = None, False
