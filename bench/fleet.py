"""The fleet: chat calls over four upstreams, through sessions' proxies vs straight to them.

Four scripted upstreams (`episodes.model.scripted.server`, real HTTP on loopback, each
answering after `--delay-ms`, a model's time on a small completion). Many sessions
call at once, each one call after another (an agent's loop):

- direct: each session calls its own upstream (session i -> upstream i % 4), no proxy;
- proxy: each session calls its proxy, whose spec names the four as `model.upstreams`;
  the worker's fleet (episodes/model/fleet.py) routes it (least-loaded, sticky).

Calls/s (all sessions together) and per-call p50 / p99, the two paths alternating
within each repeat, in one process (the proxies' loop is the clients' loop, as a
worker's sessions share one).

    python -m bench.fleet [--quick]
"""

from __future__ import annotations

import asyncio
import sys
import time

import httpx

from bench.common import fmt_spread, pct, ratio, spread, table
from episodes.model.fleet import fleet
from episodes.model.proxy import ModelProxy
from episodes.model.scripted.server import ScriptedUpstream, echo_policy
from episodes.types.model import ModelSpec, UpstreamSpec

MESSAGES = [{"role": "user", "content": "route me, please, with a few words"}]
UPSTREAMS = 4


async def _session(
    http: httpx.AsyncClient, url: str, token: str, calls: int, out: list[float]
) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    body = {"model": "m", "messages": MESSAGES}
    for _ in range(calls):
        t0 = time.perf_counter()
        r = await http.post(f"{url}/chat/completions", json=body, headers=headers)
        r.raise_for_status()
        out.append((time.perf_counter() - t0) * 1000)


async def _phase(
    http: httpx.AsyncClient, targets: list[tuple[str, str]], calls: int
) -> tuple[float, list[float]]:
    ms: list[float] = []
    t0 = time.perf_counter()
    await asyncio.gather(*(_session(http, url, tok, calls, ms) for url, tok in targets))
    return len(ms) / (time.perf_counter() - t0), ms


async def run(quick: bool = False, repeats: int | None = None, delay_ms: float = 5.0) -> dict:
    sessions = 16 if quick else 64
    calls = 5 if quick else 20
    repeats = repeats or (1 if quick else 3)
    ups = [ScriptedUpstream(policy=echo_policy, delay_s=delay_ms / 1000) for _ in range(UPSTREAMS)]
    for up in ups:
        await up.start()
    spec = ModelSpec(upstreams=[UpstreamSpec(base_url=u.base_url) for u in ups], model="m")
    proxies = [ModelProxy(spec, session_id=f"bench-{i}") for i in range(sessions)]
    samples: dict[str, dict[str, list[float]]] = {"direct": {}, "proxy": {}}
    try:
        for p in proxies:
            await p.start()
        paths = {
            "direct": [(ups[i % UPSTREAMS].base_url, "none") for i in range(sessions)],
            "proxy": [(p.base_url, p.token) for p in proxies],
        }
        limits = httpx.Limits(max_connections=sessions * 2, max_keepalive_connections=sessions * 2)
        async with httpx.AsyncClient(limits=limits, timeout=60) as http:
            for targets in paths.values():  # warm-up: connections, routes
                await _phase(http, targets, 1)
            for _ in range(repeats):
                for path, targets in paths.items():
                    rate, ms = await _phase(http, targets, calls)
                    row = samples[path]
                    row.setdefault("calls_per_s", []).append(rate)
                    row.setdefault("p50_ms", []).append(pct(ms, 0.5))
                    row.setdefault("p99_ms", []).append(pct(ms, 0.99))
        # The proxies' adaptive limits (episodes/model/limiter.py) at the end: whether
        # 429s or rising latency held the proxy path back.
        replicas = [fleet().replicas[u.base_url] for u in ups]
        limit_of = [round(r.limit, 1) for r in replicas]
        cuts = sum(r.adaptive.latency_cuts + r.adaptive.throttle_cuts for r in replicas)
    finally:
        for p in proxies:
            await p.stop()
        for up in ups:
            await up.stop()
    served = [len(u.chat_requests) for u in ups]
    figures = {path: {k: spread(v) for k, v in row.items()} for path, row in samples.items()}
    rows = [
        [
            path,
            fmt_spread(f["calls_per_s"], "", 0),
            fmt_spread(f["p50_ms"], " ms"),
            fmt_spread(f["p99_ms"], " ms"),
        ]
        for path, f in figures.items()
    ]
    print(
        f"fleet: {sessions} sessions x {calls} calls over {UPSTREAMS} upstreams "
        f"({delay_ms:g} ms each), {repeats} repeat(s), median [min..max]"
    )
    print(table(rows, ["path", "calls/s", "p50", "p99"]))
    med = {p: {k: figures[p][k]["median"] for k in figures[p]} for p in figures}
    ratios = {
        "calls_per_s_proxy_vs_direct": ratio(
            med["proxy"]["calls_per_s"], med["direct"]["calls_per_s"]
        ),
        "p99_proxy_vs_direct": ratio(med["proxy"]["p99_ms"], med["direct"]["p99_ms"]),
    }
    print(f"  calls served per upstream (both paths): {served}")
    print(f"  adaptive limit per upstream at the end: {limit_of} ({cuts} cuts)")
    for k, v in ratios.items():
        print(f"  {k}: {v:.2f}x")
    return {
        "sessions": sessions,
        "calls": calls,
        "upstreams": UPSTREAMS,
        "delay_ms": delay_ms,
        "repeats": repeats,
        "served_per_upstream": served,
        "limit_per_upstream": limit_of,
        "limit_cuts": cuts,
        "figures": figures,
        "ratios": ratios,
    }


if __name__ == "__main__":
    asyncio.run(run(quick="--quick" in sys.argv[1:]))
