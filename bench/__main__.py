"""`python -m bench [NAMES...] [--quick] [--repeats N]` (= `make bench BENCH_ARGS=...`).

Runs the benchmarks (all, or the ones named), prints each one's figures and its
ratios against the baseline measured in the same run, checks the targets of issue 5,
and writes everything to bench/results/latest.json.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import importlib
import json
import math
import os
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Any

BENCHMARKS = {
    "overhead": "bench.turn_overhead",
    "respawn": "bench.respawn",
    "throughput": "bench.throughput",
    "box": "bench.box_cost",
    "long": "bench.long",
    "levers": "bench.levers",
    "density": "bench.density",
    "pool": "bench.pool",
    "warm": "bench.warm",
    "agents": "bench.agent_overhead",
    "agents_scale": "bench.agents_scale",
    "training": "bench.training_export",
    "viewer": "bench.viewer",
    "blocking_score": "bench.blocking_score",
    "events": "bench.driver_events",
    "workflow_runner": "bench.workflow_runner",
    "fleet": "bench.fleet",
    "replay": "bench.replay_cost",
    "tracing": "bench.tracing",
    "staleness": "bench.staleness",
    # Not in the default set (minutes to an hour, the machine to themselves): by name.
    "big_batch": "bench.big_batch",
    "scale": "bench.scale",
}
OPT_IN = {"big_batch", "scale"}
RESULTS = Path(__file__).resolve().parent / "results" / "latest.json"


def _get(d: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(d, dict) or key not in d:
            return None
        d = d[key]
    return d


def targets(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Issue 5's targets, judged from this run's figures (None: not measured this run)."""
    out: dict[str, dict[str, Any]] = {}
    # Issue 5's per-turn target, on the shipped workflow (the turn-design study judged
    # it per turn-index bucket of each prototype; bench/README.md keeps its figures).
    turn = _get(results, "overhead", "figures", "temporal")
    if turn and "median" in turn:
        median, p95 = turn["median"]["median"], turn["p95"]["median"]
        out["overhead[shipped]"] = {
            "target": "per-turn <= 5 ms median and p95 <= 10 ms",
            "value": f"median {median:.2f} ms, p95 {p95:.2f} ms",
            "met": median <= 5 and p95 <= 10,
        }
    for key, fig in (_get(results, "throughput", "figures") or {}).items():
        tps = fig["turns_per_s"]["median"]
        out[f"throughput[{key}]"] = {
            "target": ">= 250 turns/s, 100 concurrent episodes on one worker",
            "value": f"{tps:.0f} turns/s",
            "met": tps >= 250,
        }
    r = _get(results, "throughput", "ratios", "durable_vs_in_process")
    if r is not None:
        out["throughput_vs_in_process"] = {
            "target": "durable/in-process turns/s >= 0.6x (issue 13)",
            "value": f"{r:.2f}x",
            "met": r >= 0.6,
        }
    r = _get(results, "throughput", "ratios", "sandbox_vs_plain_in_process")
    if r is not None:
        out["sandbox_vs_plain_in_process"] = {
            "target": "in-process turns/s, the default sandbox / isolation: none >= 0.85x "
            "(issue 32)",
            "value": f"{r:.2f}x",
            "met": r >= 0.85,
        }
    r = _get(results, "throughput", "ratios", "groups_vs_in_process_plain")
    if r is not None:
        out["groups_vs_in_process_plain"] = {
            "target": "durable group execution (groups of 8) / in-process isolation: none "
            "turns/s >= 0.8x (issue 32)",
            "value": f"{r:.2f}x",
            "met": r >= 0.8,
        }
    box = _get(results, "box", "figures", "sandbox", "cpu_ms_per_box", "median")
    if box is not None:
        out["sandbox_box_cpu"] = {
            "target": "a sandbox's start, one process and stop <= 15 ms of CPU (issue 32)",
            "value": f"{box:.1f} ms",
            "met": box <= 15,
        }
    one = _get(results, "overhead", "figures", "temporal")
    if one and "one_turn_episode_ms" in one:
        ms = one["one_turn_episode_ms"]["median"]
        cpu = (
            one["server_cpu_ms_per_episode"]["median"] + one["worker_cpu_ms_per_episode"]["median"]
        )
        direct = _get(results, "overhead", "figures", "direct", "one_turn_episode_ms", "median")
        out["one_turn_episode"] = {
            "target": "1-turn episode <= 60 ms median over its in-process time, "
            "server + worker CPU <= 50 ms (issue 13)",
            "value": f"{ms:.1f} ms (in-process {direct:.1f} ms: +{ms - direct:.1f}), "
            f"CPU {cpu:.1f} ms",
            "met": ms - direct <= 60 and cpu <= 50,
        }
    lng = _get(results, "long", "figures")
    if lng:
        p99, worst = lng["p99_ms"]["median"], lng["worst_boundary_ms"]["max"]
        out["long_episode"] = {
            "target": "no turn of a 2,000-turn episode > 10 ms, boundaries included (issue 13)",
            "value": f"p99 {p99:.2f} ms, worst boundary {worst:.2f} ms",
            "met": p99 <= 10 and worst <= 10,
        }
    r = _get(results, "respawn", "ratios", "realistic")
    if r is not None:
        out["persistent_vs_respawn"] = {
            "target": "persistent >= 100x faster per turn than respawning a realistic harness",
            "value": f"{r:.0f}x",
            "met": r >= 100,
        }
    dens = _get(results, "density", "figures")
    if dens:
        per = dens["worker_rss_per_session_mib"]
        out["density"] = {
            "target": "1,000 live sessions at < 2 MiB worker RSS each",
            "value": f"{dens['sessions']} sessions, {per:.2f} MiB each",
            "met": dens["sessions"] >= 1000 and per < 2,
        }
    r = _get(results, "pool", "ratios", "docker_box_cold_vs_warm")
    if r is not None:
        out["pool_docker"] = {
            "target": "warm lease >= 100x faster than a cold Docker provision",
            "value": f"{r:.0f}x",
            "met": r >= 100,
        }
    scale = _get(results, "agents_scale")
    if scale:
        fig, rat = scale["figures"], scale["ratios"]
        checks = [
            ("proxy_cpu_ms_per_call", fig.get("proxy_cpu_ms_per_call"), "<=", 0.3),
            ("proxy_cpu_us_per_chunk", fig.get("proxy_cpu_us_per_chunk"), "<=", 10),
            ("proxied_vs_direct_calls_per_s", rat.get("proxied_vs_direct_calls_per_s"), ">=", 0.9),
            ("rss_mib_per_agent_session", fig.get("rss_mib_per_agent_session"), "<=", 1.0),
            ("record_growth_200_vs_100", rat.get("record_growth_200_vs_100"), "<=", 2.5),
        ]
        for name, value, op, bound in checks:
            if value is None:
                continue
            out[f"agents_scale[{name}]"] = {
                "target": f"{name} {op} {bound} (issue 22)",
                "value": f"{value:.3f}",
                "met": value <= bound if op == "<=" else value >= bound,
            }
    return out


def _clean(value: Any) -> Any:
    """JSON without NaN/inf (they become null)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "names",
        nargs="*",
        help=f"any of {', '.join(BENCHMARKS)} (default: all but {', '.join(OPT_IN)})",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, one repeat")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    names = args.names or [n for n in BENCHMARKS if n not in OPT_IN]
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark {unknown[0]!r}; choose from {', '.join(BENCHMARKS)}")
    results: dict[str, Any] = {}
    errors: dict[str, str] = {}
    started = time.time()
    for name in names:
        print(f"\n== {name} ==", flush=True)
        t0 = time.perf_counter()
        try:
            module = importlib.import_module(BENCHMARKS[name])
            results[name] = await module.run(quick=args.quick, repeats=args.repeats)
            results[name]["seconds"] = time.perf_counter() - t0
        except Exception as e:
            traceback.print_exc()
            errors[name] = f"{type(e).__name__}: {e}"
        sys.stdout.flush()
    judged = targets(results)
    if judged:
        note = " (quick run: smaller sizes than the targets name; indicative only)"
        print("\n== targets (issue 5) ==" + (note if args.quick else ""))
        for name, t in judged.items():
            print(f"  [{'met' if t['met'] else 'NOT met'}] {name}: {t['value']} ({t['target']})")
    report = {
        "started": datetime.datetime.fromtimestamp(started, datetime.UTC).isoformat(),
        "quick": args.quick,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "results": results,
        "targets": judged,
        "errors": errors,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(_clean(report), indent=2) + "\n")
    print(f"\nresults: {args.out}")
    for name, err in errors.items():
        print(f"  {name} FAILED: {err}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
