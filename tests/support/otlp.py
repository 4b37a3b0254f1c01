"""A loopback OTLP/HTTP trace receiver: what a collector gets, decoded, for the tests.

`OtlpReceiver()` listens on 127.0.0.1 (a free port) and takes `POST /v1/traces`
bodies as the OpenTelemetry SDK's OTLP/HTTP exporter sends them (protobuf
`ExportTraceServiceRequest`), decoded with OpenTelemetry's own proto package. Each
span is kept as a `Received` with its resource's attributes.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


def _attributes(items: Any) -> dict[str, Any]:
    return {a.key: _value(a.value) for a in items}


@dataclass
class Received:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    resource: dict[str, Any]
    events: list[str] = field(default_factory=list)
    status: int = 0
    scope: str = ""


class OtlpReceiver:
    def __init__(self) -> None:
        self.spans: list[Received] = []
        self.requests = 0
        lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                with lock:
                    receiver.requests += 1
                    for rs in request.resource_spans:
                        resource = _attributes(rs.resource.attributes)
                        for ss in rs.scope_spans:
                            for s in ss.spans:
                                receiver.spans.append(
                                    Received(
                                        name=s.name,
                                        trace_id=s.trace_id.hex(),
                                        span_id=s.span_id.hex(),
                                        parent_id=s.parent_span_id.hex(),
                                        start_ns=s.start_time_unix_nano,
                                        end_ns=s.end_time_unix_nano,
                                        attributes=_attributes(s.attributes),
                                        resource=resource,
                                        events=[e.name for e in s.events],
                                        status=s.status.code,
                                        scope=ss.scope.name,
                                    )
                                )
                out = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def env(self, service: str | None = None) -> dict[str, str]:
        """The OTEL_* variables that send a process's spans here, promptly."""
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": self.endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_BSP_SCHEDULE_DELAY": "200",
        }
        if service:
            env["OTEL_SERVICE_NAME"] = service
        return env

    def of_trace(self, trace_id: str) -> list[Received]:
        return [s for s in self.spans if s.trace_id == trace_id]

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()


def waterfall_html(spans: list[Received], title: str) -> str:
    """The spans of one trace as a static HTML waterfall (docs/operations/metrics.md's
    picture): one row a span, indented under its parent, a bar for its time."""
    import html

    by_id = {s.span_id: s for s in spans}
    children: dict[str, list[Received]] = {}
    for s in spans:
        parent = s.parent_id if s.parent_id in by_id else ""
        children.setdefault(parent, []).append(s)
    rows: list[tuple[int, Received]] = []

    def walk(parent: str, depth: int) -> None:
        for s in sorted(children.get(parent, []), key=lambda x: (x.start_ns, x.name)):
            rows.append((depth, s))
            walk(s.span_id, depth + 1)

    walk("", 0)
    t0 = min(s.start_ns for s in spans)
    span_ns = max(max(s.end_ns for s in spans) - t0, 1)
    out = [
        "<!doctype html><meta charset=utf-8><style>",
        "body{font:12px system-ui,sans-serif;margin:16px;width:1100px}",
        ".r{display:flex;align-items:center;height:17px}",
        ".n{width:380px;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}",
        ".t{position:relative;flex:1;height:11px;background:#f3f3f3}",
        ".b{position:absolute;height:11px;min-width:2px;background:#4f7cac}",
        ".w .b{background:#8fb573}.m .b{background:#d08c3c}.s .b{background:#9a6fb0}",
        ".d{width:70px;text-align:right;color:#555}</style>",
        f"<h3>{html.escape(title)}</h3>",
    ]
    for depth, s in rows:
        left = 100 * (s.start_ns - t0) / span_ns
        width = 100 * max(s.end_ns - s.start_ns, 0) / span_ns
        kind = "m" if s.name.startswith(("chat", "execute_tool")) else ""
        kind = kind or ("s" if s.name.startswith("episodes.") else "w")
        who = s.resource.get("service.name", "")
        label = f"{'&nbsp;' * 3 * depth}{html.escape(s.name)} <i>{html.escape(str(who))}</i>"
        ms = (s.end_ns - s.start_ns) / 1e6
        out.append(
            f'<div class="r {kind}"><div class=n>{label}</div><div class=t>'
            f'<div class=b style="left:{left:.2f}%;width:{width:.2f}%"></div></div>'
            f"<div class=d>{ms:.1f} ms</div></div>"
        )
    return "\n".join(out)
