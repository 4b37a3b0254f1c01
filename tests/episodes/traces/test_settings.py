"""Which OTEL_* settings turn traces on, and the one-line errors for the rest; and
that traces off cost no import of OpenTelemetry."""

from __future__ import annotations

import subprocess
import sys

import pytest

from episodes.traces.context import trace_id_of
from episodes.traces.settings import TracingConfigError, exporter_of, protocol_of
from episodes.traces.spans import _model_call
from tests.conftest import ROOT


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, None),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, "otlp"),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, "otlp"),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, "otlp"),
        ({"OTEL_TRACES_EXPORTER": "console"}, "console"),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c"}, None),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c"}, None),
        ({"OTEL_SDK_DISABLED": "false", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c"}, "otlp"),
    ],
)
def test_which_settings_turn_traces_on(environ, expected) -> None:
    assert exporter_of(environ) == expected


def test_bad_settings_are_one_line_errors() -> None:
    with pytest.raises(TracingConfigError, match="OTEL_TRACES_EXPORTER='zipkin'") as e:
        exporter_of({"OTEL_TRACES_EXPORTER": "zipkin"})
    assert "\n" not in str(e.value)
    with pytest.raises(TracingConfigError, match="http/json"):
        protocol_of({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})
    assert protocol_of({}) == "http/protobuf"
    assert protocol_of({"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}) == "grpc"


def test_an_episodes_trace_id_is_found_from_its_workflow_id() -> None:
    one = trace_id_of("batch.t0.s0")
    assert one == trace_id_of("batch.t0.s0") and len(one) == 32
    assert one != trace_id_of("batch.t0.s1")
    int(one, 16)


def test_a_model_call_maps_onto_gen_ai_attributes() -> None:
    name, attributes = _model_call(
        {
            "kind": "model_call",
            "id": "c3",
            "request": {"model": "qwen", "messages": []},
            "response": {
                "id": "r1",
                "model": "qwen-served",
                "choices": [{"finish_reason": "stop", "message": {"content": "x"}}],
            },
            "usage": {
                "prompt_tokens": 120,
                "completion_tokens": 7,
                "prompt_tokens_details": {"cached_tokens": 100},
                "completion_tokens_details": {"reasoning_tokens": 5},
            },
            "upstream": "http://replica-2:8000/v1",
            "policy_version": 4,
            "attempts": 2,
            "status": 200,
            "ms": 12.5,
        }
    )
    assert name == "chat qwen"
    assert attributes["gen_ai.request.model"] == "qwen"
    assert attributes["gen_ai.response.model"] == "qwen-served"
    assert attributes["gen_ai.response.finish_reasons"] == ["stop"]
    assert attributes["gen_ai.usage.input_tokens"] == 120
    assert attributes["gen_ai.usage.output_tokens"] == 7
    assert attributes["gen_ai.usage.cache_read.input_tokens"] == 100
    assert attributes["gen_ai.usage.reasoning.output_tokens"] == 5
    assert attributes["server.address"] == "http://replica-2:8000/v1"
    assert attributes["episodes.policy_version"] == 4
    assert attributes["episodes.call.attempts"] == 2


def test_traces_off_import_nothing_of_opentelemetry() -> None:
    """Off by default at no cost: a worker's and a client's modules, a session's turn
    helpers and a client's connect path load without OpenTelemetry."""
    code = (
        "import sys, episodes.session.live, episodes.client.connect, workers.worker\n"
        "from episodes.traces import turn_span, enabled, start_tracing\n"
        "assert not start_tracing('x') and not enabled()\n"
        "with turn_span('s', 0) as span: span.set('k', 1)\n"
        "loaded = [m for m in sys.modules if m.startswith('opentelemetry')]\n"
        "assert not loaded, loaded\n"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_the_dev_server_we_start_does_not_read_our_otel_settings() -> None:
    """Temporal's server reads OTEL_* too, and would not start on `console` (seen:
    `episodes run` with OTEL_TRACES_EXPORTER=console exited 'unsupported OTEL
    exporter')."""
    from episodes.client.devserver import server_env

    env = {"PATH": "/bin", "OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "x"}
    assert server_env(env) == {"PATH": "/bin"}
