"""Model proxy overhead: chat calls through the session's proxy vs straight to the upstream.

The upstream is the scripted one (`episodes.model.scripted.server`, real HTTP on loopback,
answering at once), so the difference is what the proxy adds per call: the token
check, forcing the spec's fields, the upstream hop and the record. Calls alternate
between the two paths within each repeat (same client library, same load), for
plain and streamed calls.

    python -m bench.proxy_overhead [--quick]
"""

from __future__ import annotations

import asyncio
import sys
import time

import openai

from bench.common import fmt_spread, ratio, spread, summary, table
from episodes.model.proxy import ModelProxy
from episodes.model.scripted.server import ScriptedUpstream, echo_policy
from episodes.types.model import ModelSpec

MESSAGES = [{"role": "user", "content": "measure me, please, with a few words"}]


async def _call(client: openai.AsyncOpenAI, stream: bool) -> float:
    t0 = time.perf_counter()
    if stream:
        async for _ in await client.chat.completions.create(
            model="m", messages=MESSAGES, stream=True
        ):
            pass
    else:
        await client.chat.completions.create(model="m", messages=MESSAGES)
    return (time.perf_counter() - t0) * 1000


async def run(quick: bool = False, repeats: int | None = None) -> dict:
    calls = 20 if quick else 200
    repeats = repeats or (1 if quick else 3)
    samples: dict[str, dict[str, list[float]]] = {}
    recorded = 0

    def on_call(record: dict) -> None:
        nonlocal recorded
        recorded += 1

    async with ScriptedUpstream(policy=echo_policy, key="bench-key") as up:
        spec = ModelSpec(base_url=up.base_url, model="m", token_data=True)
        async with ModelProxy(spec, upstream_key="bench-key", on_call=on_call) as proxy:
            clients = {
                "direct": openai.AsyncOpenAI(
                    base_url=up.base_url, api_key="bench-key", max_retries=0
                ),
                "proxy": openai.AsyncOpenAI(
                    base_url=proxy.base_url, api_key=proxy.token, max_retries=0
                ),
            }
            for stream in (False, True):
                for path in clients:  # warm-up: connections, imports
                    await _call(clients[path], stream)
                for _ in range(repeats):
                    ms: dict[str, list[float]] = {p: [] for p in clients}
                    for _ in range(calls):
                        for path, client in clients.items():
                            ms[path].append(await _call(client, stream))
                    for path, values in ms.items():
                        s = summary(values)
                        row = samples.setdefault(f"{path}_{'stream' if stream else 'plain'}", {})
                        row.setdefault("median", []).append(s["median"])
                        row.setdefault("p95", []).append(s["p95"])
            for client in clients.values():
                await client.close()

    figures = {name: {k: spread(v) for k, v in row.items()} for name, row in samples.items()}
    med = {name: figures[name]["median"]["median"] for name in figures}
    overhead = {kind: med[f"proxy_{kind}"] - med[f"direct_{kind}"] for kind in ("plain", "stream")}
    ratios = {kind: ratio(med[f"proxy_{kind}"], med[f"direct_{kind}"]) for kind in overhead}
    rows = [
        [name, fmt_spread(figures[name]["median"], " ms"), fmt_spread(figures[name]["p95"], " ms")]
        for name in figures
    ]
    print(f"proxy overhead: {calls} calls per path, {repeats} repeat(s), median [min..max]")
    print(table(rows, ["path", "per-call median", "per-call p95"]))
    for kind in overhead:
        print(f"  {kind}: proxy adds {overhead[kind]:.2f} ms per call ({ratios[kind]:.2f}x direct)")
    return {
        "calls": calls,
        "repeats": repeats,
        "recorded": recorded,
        "figures": figures,
        "overhead_ms": overhead,
        "ratios": ratios,
    }


if __name__ == "__main__":
    asyncio.run(run(quick="--quick" in sys.argv[1:]))
