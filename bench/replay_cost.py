"""Exact replay's cost: a model call answered from the record vs made live, and the
replay plan built from a recorded conversation.

One conversation of `turns` calls (a user message each, the answer appended) is made
live through a session's model proxy to the scripted upstream (real HTTP on loopback,
answering at once), recorded as the proxy records it, and then made again through a
fresh proxy in replay: the per-call time of each path (the official `openai` client,
plain and streamed), and the time `Replay` takes to read the record (conversations
resolved, digests computed) per recorded call. A real upstream's sampling time is
what the replay saves on top of these. Beside them, `bench/fork_snapshot.py`: a fork's
box from a Docker commit of the parent's vs a fresh box with the work done again.

    python -m bench.replay_cost [--quick]
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

import openai

from bench.common import fmt_spread, spread, summary, table
from episodes.model.proxy import ModelProxy
from episodes.model.scripted.server import ScriptedUpstream, echo_policy
from episodes.replay import Replay
from episodes.types.model import ModelSpec


async def _conversation(client: openai.AsyncOpenAI, turns: int, stream: bool) -> list[float]:
    """`turns` calls of one growing conversation; each call's ms."""
    messages: list[dict[str, Any]] = []
    times = []
    for i in range(turns):
        messages.append({"role": "user", "content": f"turn {i}: tell me something, please"})
        t0 = time.perf_counter()
        if stream:
            parts = []
            async for chunk in await client.chat.completions.create(
                model="m", messages=messages, stream=True
            ):
                if chunk.choices and chunk.choices[0].delta.content:
                    parts.append(chunk.choices[0].delta.content)
            content = "".join(parts)
        else:
            reply = await client.chat.completions.create(model="m", messages=messages)
            content = reply.choices[0].message.content or ""
        times.append((time.perf_counter() - t0) * 1000)
        messages.append({"role": "assistant", "content": content})
    return times


async def run(quick: bool = False, repeats: int | None = None) -> dict:
    turns = 10 if quick else 100
    repeats = repeats or (1 if quick else 3)
    samples: dict[str, dict[str, list[float]]] = {}
    async with ScriptedUpstream(policy=echo_policy) as up:
        spec = ModelSpec(base_url=up.base_url, model="m", token_data=True)
        for stream in (False, True):
            kind = "stream" if stream else "plain"
            for _ in range(repeats):
                events: list[Any] = []
                async with ModelProxy(spec, on_call=events.append) as live:
                    client = openai.AsyncOpenAI(
                        base_url=live.base_url, api_key=live.token, max_retries=0
                    )
                    live_ms = await _conversation(client, turns, stream)
                    await client.close()
                events = json.loads(json.dumps(events))  # as a restore reads it back
                t0 = time.perf_counter()
                replay = Replay([events])  # one turn
                plan_ms = (time.perf_counter() - t0) * 1000 / turns
                before = len(up.chat_requests)
                async with ModelProxy(spec) as proxy:
                    proxy.replay = replay
                    client = openai.AsyncOpenAI(
                        base_url=proxy.base_url, api_key=proxy.token, max_retries=0
                    )
                    replay_ms = await _conversation(client, turns, stream)
                    await client.close()
                assert len(up.chat_requests) == before, "a replayed call reached the upstream"
                assert replay.divergences == 0 and replay.answered == turns
                for name, values in (("live", live_ms), ("replay", replay_ms)):
                    row = samples.setdefault(f"{name}_{kind}", {})
                    row.setdefault("median", []).append(summary(values)["median"])
                samples.setdefault(f"plan_{kind}", {}).setdefault("per_call", []).append(plan_ms)
    figures = {name: {k: spread(v) for k, v in row.items()} for name, row in samples.items()}
    rows = [
        [name, fmt_spread(next(iter(fig.values())), " ms")] for name, fig in sorted(figures.items())
    ]
    print(f"replay cost: a {turns}-call conversation, {repeats} repeat(s), median [min..max]")
    print(table(rows, ["path", "per call"]))
    # A fork's box, beside: a Docker commit of the parent's vs a fresh box + the work again.
    from bench import fork_snapshot

    snapshot = await fork_snapshot.run(quick=quick, repeats=repeats)
    return {"turns": turns, "repeats": repeats, "figures": figures, "fork_snapshot": snapshot}


if __name__ == "__main__":
    asyncio.run(run(quick="--quick" in sys.argv[1:]))
