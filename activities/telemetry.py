"""Prometheus metrics of a worker: the Temporal SDK's and this project's, on one port.

`--metrics-port P` serves one scrape target at `http://HOST:P/metrics`:
- the SDK runtime's own Prometheus exporter (`temporalio.runtime.PrometheusConfig`:
  `temporal_*` series: task slots, poll latencies, activity/workflow outcomes) runs
  on a private loopback port, and each scrape of P reads it and serves its families;
- this project's `episodes_*` series from `prometheus-client` (below).

One target means one scrape config and one `instance` label for both halves.
"""

from __future__ import annotations

import socket
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

REGISTRY = CollectorRegistry()

LIVE_SESSIONS = Gauge(
    "episodes_live_sessions", "Sessions this worker holds.", ["worker"], registry=REGISTRY
)
MAX_SESSIONS = Gauge(
    "episodes_max_sessions", "Sessions this worker may hold.", ["worker"], registry=REGISTRY
)
PROVISIONS_PAUSED = Gauge(
    "episodes_provisions_paused",
    "1 while this worker takes no provisions: too many in a row failed (its breaker).",
    ["worker"],
    registry=REGISTRY,
)
BOX_WAITS = Gauge(
    "episodes_box_waits",
    "Provisions on this worker waiting for room under its box caps (it takes no "
    "provisions meanwhile).",
    ["worker"],
    registry=REGISTRY,
)
BOX_FAILOVERS = Counter(
    "episodes_box_failovers",
    "Sessions whose box died under them (not by the harness's doing) and were dropped "
    "for a fresh box elsewhere.",
    registry=REGISTRY,
)
PROVISIONS = Counter(
    "episodes_provisions",
    "Provision attempts by outcome (ok, harness_failure, spec_error, error).",
    ["outcome"],
    registry=REGISTRY,
)
POOL_LEASES = Counter(
    "episodes_pool_leases",
    "Boxes taken from a pool (hit) or started for it (miss).",
    ["result"],
    registry=REGISTRY,
)
TURN_SECONDS = Histogram(
    "episodes_turn_seconds",
    "Wall time of a turn on the worker (harness reply + env step).",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
    registry=REGISTRY,
)
TERMINATIONS = Counter(
    "episodes_terminations",
    "Episodes ended on this worker, by termination kind.",
    ["kind"],
    registry=REGISTRY,
)
RESTARTS = Counter(
    "episodes_restarts",
    "Sessions restarted (re-provisioned after a loss), by what was lost.",
    ["kind"],
    registry=REGISTRY,
)
AGENT_CALLS = Counter(
    "episodes_agent_calls",
    "Calls a session's services served: tool_call (MCP bridge), model_call (proxy).",
    ["kind"],
    registry=REGISTRY,
)


class FleetMetrics(Collector):
    """The model fleet as this worker sees it (episodes/model/fleet.py), per upstream,
    read at each scrape: calls in flight and waiting, the adaptive limit, sessions
    sticking to it, whether it is ejected, and calls served / throttled / failed."""

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        from episodes.model import fleet

        gauges = {
            "in_flight": "Calls in flight to the upstream.",
            "waiting": "Calls waiting for a place under its adaptive limit.",
            "limit": "Its adaptive concurrency limit (429 / 503 and latency).",
            "sessions": "Sessions sticking to it.",
            "ejected": "1 while it is ejected (failing).",
        }
        counters = {
            "served": "Calls it answered.",
            "throttled": "429 / 503 answers it gave.",
            "failed": "Failed attempts (5xx, timeouts, connection errors).",
        }
        g = {
            k: GaugeMetricFamily(f"episodes_upstream_{k}", h, labels=["upstream"])
            for k, h in gauges.items()
        }
        c = {
            k: CounterMetricFamily(f"episodes_upstream_{k}", h, labels=["upstream"])
            for k, h in counters.items()
        }
        saturated = GaugeMetricFamily(
            "episodes_fleet_saturated",
            "1 while most sessions wait on the fleet (no new episodes are taken).",
        )
        saturated.add_metric([], 1.0 if fleet.saturated() else 0.0)
        for r in fleet.all_replicas():
            values = {
                "in_flight": r.in_flight,
                "waiting": r.waiting,
                "limit": r.limit,
                "sessions": r.sessions,
                "ejected": 1.0 if r.ejected_until > time.monotonic() else 0.0,
            }
            for k, v in values.items():
                g[k].add_metric([r.name], float(v))
            for k in counters:
                c[k].add_metric([r.name], float(getattr(r, k)))
        yield from g.values()
        yield from c.values()
        yield saturated


REGISTRY.register(FleetMetrics())


def count_agent_call(event: dict[str, Any]) -> None:
    AGENT_CALLS.labels(kind=str(event.get("kind", "unknown"))).inc()


def record_restart(kind: str) -> None:
    """For the restart path: one session re-provisioned after `kind` was lost."""
    RESTARTS.labels(kind=kind).inc()


class SdkMetrics(Collector):
    """The SDK runtime's Prometheus text, re-served from our registry on each scrape."""

    def __init__(self, url: str) -> None:
        self.url = url

    def collect(self) -> Iterator[Any]:
        try:
            with urllib.request.urlopen(self.url, timeout=2) as resp:
                text = resp.read().decode()
        except OSError:
            return  # the runtime's exporter is not up (yet): serve our own series only
        yield from text_string_to_metric_families(text)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class MetricsServer:
    """The runtime to connect with and the HTTP endpoint serving both halves."""

    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
        from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

        sdk = f"127.0.0.1:{free_port()}"
        self.runtime = Runtime(
            telemetry=TelemetryConfig(
                metrics=PrometheusConfig(
                    bind_address=sdk, counters_total_suffix=True, durations_as_seconds=True
                )
            )
        )
        self._sdk = SdkMetrics(f"http://{sdk}/metrics")
        REGISTRY.register(self._sdk)
        self.port = port or free_port(host)
        self.host = host
        self._server, self._thread = start_http_server(self.port, addr=host, registry=REGISTRY)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        REGISTRY.unregister(self._sdk)
