"""Traces off cost nothing: a session's turns with the shipped (off) trace hooks, with
the hooks taken out, and with traces on, side by side in one run.

Three `LiveSession`s of the stamp harness turn in-process (no Temporal), their turns
interleaved so the machine's load falls on all three alike:
- `no hooks`: the turn without its span helper (`_turn_traced` called directly), the
  baseline;
- `off (shipped)`: the session as shipped, traces off (one test a turn and a call);
- `on`: traces on, spans kept in memory (the SDK's `InMemorySpanExporter` behind a
  `BatchSpanProcessor`, as the worker exports): the cost of writing a turn's span,
  no network.

    python -m bench.tracing [--quick]
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

from bench.common import fmt_spread, ratio, script_spec, spread, summary, table
from episodes.session.live import LiveSession
from episodes.traces import OFF
from episodes.traces import setup as trace_setup


class _NoHooks(LiveSession):
    async def _run_turn(self, n: int, on_event: Any) -> Any:
        return await self._turn_traced(n, on_event, OFF)


async def run(quick: bool = False, repeats: int | None = None) -> dict:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    turns = 100 if quick else 1000
    repeats = repeats or (1 if quick else 3)
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(memory))  # as the worker's
    from opentelemetry import trace

    trace.set_tracer_provider(provider)
    samples: dict[str, list[float]] = {}
    for _ in range(repeats):
        spec = script_spec(turns)
        sessions = {
            "no hooks": _NoHooks(spec, spec.tasks[0], 0, "bench-nohooks"),
            "off (shipped)": LiveSession(spec, spec.tasks[0], 0, "bench-off"),
            "on": LiveSession(spec, spec.tasks[0], 0, "bench-on"),
        }
        ms: dict[str, list[float]] = {name: [] for name in sessions}
        try:
            for s in sessions.values():
                await s.open()
            names = list(sessions)
            for n in range(turns):
                # Each goes first, second and third in turn: no order is favoured.
                for name in names[n % 3 :] + names[: n % 3]:
                    s = sessions[name]
                    trace_setup._provider = provider if name == "on" else None
                    t0 = time.perf_counter()
                    await s.turn(n)
                    ms[name].append((time.perf_counter() - t0) * 1000)
        finally:
            trace_setup._provider = None
            for s in sessions.values():
                await s.close()
        base = ms["no hooks"]
        for name, values in ms.items():
            samples.setdefault(name, []).append(summary(values[1:])["median"])
            # Paired with the baseline's same turn, measured moments apart: the load
            # drift of a busy machine cancels out of the difference.
            added = [(v - b) * 1000 for v, b in zip(values[1:], base[1:], strict=True)]
            samples.setdefault(f"{name} added", []).append(summary(added)["median"])
    figures = {name: spread(v) for name, v in samples.items()}
    ratios = {name: ratio(figures[name]["median"], figures["no hooks"]["median"]) for name in ms}
    provider.force_flush()
    spans = len(memory.get_finished_spans())
    print(f"tracing: {turns} turns per session, {repeats} repeat(s), median [min..max]")
    print(
        table(
            [
                [
                    n,
                    fmt_spread(figures[n], " ms", 3),
                    f"{ratios[n]:.3f}x",
                    fmt_spread(figures[f"{n} added"], " us", 1),
                ]
                for n in ms
            ],
            ["session", "per-turn median", "vs no hooks", "added a turn (paired)"],
        )
    )
    print(f"  spans written with traces on: {spans} (one a turn)")
    return {"turns": turns, "repeats": repeats, "figures": figures, "ratios": ratios}


if __name__ == "__main__":
    asyncio.run(run(quick="--quick" in sys.argv[1:]))
