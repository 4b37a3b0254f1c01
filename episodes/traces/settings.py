"""Whether traces are asked for, and how they leave: the standard `OTEL_*` variables.

Only the variables OpenTelemetry defines are read, so a deployment that already sets
them for other services needs nothing new:

| variable | effect here |
|---|---|
| `OTEL_SDK_DISABLED=true` | off, whatever else is set |
| `OTEL_TRACES_EXPORTER` | `otlp` (default when an endpoint is set), `console`, `none` |
| `OTEL_EXPORTER_OTLP_ENDPOINT` / `..._TRACES_ENDPOINT` | on, sent there |
| `OTEL_EXPORTER_OTLP_PROTOCOL` / `..._TRACES_PROTOCOL` | `http/protobuf` (default) or `grpc` |
| `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_BSP_*` | read by the SDK itself |

Standard library only: deciding that tracing is off must cost nothing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Literal

Exporter = Literal["otlp", "console"]
Protocol = Literal["http/protobuf", "grpc"]


class TracingConfigError(ValueError):
    """An `OTEL_*` setting this project cannot honour; the message is one line."""


def _get(environ: Mapping[str, str], name: str) -> str:
    return environ.get(name, "").strip()


def tracing_requested(environ: Mapping[str, str] | None = None) -> bool:
    """True when the environment asks for traces (see the module doc)."""
    return exporter_of(os.environ if environ is None else environ) is not None


def exporter_of(environ: Mapping[str, str]) -> Exporter | None:
    """The span exporter the environment asks for, or None (tracing off)."""
    if _get(environ, "OTEL_SDK_DISABLED").lower() == "true":
        return None
    named = _get(environ, "OTEL_TRACES_EXPORTER").lower()
    endpoint = _get(environ, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or _get(
        environ, "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if named in ("", "otlp"):
        return "otlp" if (endpoint or named == "otlp") else None
    if named == "none":
        return None
    if named == "console":
        return "console"
    raise TracingConfigError(
        f"OTEL_TRACES_EXPORTER={named!r} is not supported here: use otlp, console or none"
    )


def protocol_of(environ: Mapping[str, str]) -> Protocol:
    """The OTLP transport the environment asks for (default `http/protobuf`)."""
    value = (
        _get(environ, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or _get(environ, "OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).lower()
    if value in ("http/protobuf", "grpc"):
        return value  # type: ignore[return-value]
    raise TracingConfigError(
        f"OTEL_EXPORTER_OTLP_PROTOCOL={value!r} is not supported here: use http/protobuf or grpc"
    )
