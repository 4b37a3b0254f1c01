"""A batch of agent episodes over a fleet of four real upstreams on loopback: one fast,
one slow, one that dies mid-batch, one that answers 429 under load. Every episode ends
`env_done`; each session stays on one upstream unless that one died; the fast one
served more calls than the slow one; the 429s delayed calls and failed none."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from aiohttp import web

from episodes.client import EpisodesClient
from episodes.model.scripted.server import ScriptedUpstream, kv_policy
from episodes.types.spec import parse_spec

pytestmark = pytest.mark.timeout(240)

N_EPISODES = 12
CONCURRENCY = 6  # the later episodes start while the slow upstream holds its calls
SLOW_S = 2.0  # each call there: long beside the fast one's, so its load shows


class Throttling(ScriptedUpstream):
    """Answers 429 (`Retry-After: 0.2`) while it already serves `capacity` calls."""

    def __init__(self, *args: Any, capacity: int = 1, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.capacity = capacity
        self.busy = 0
        self.refused = 0

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        if self.busy >= self.capacity:
            self.refused += 1
            body = {"error": {"message": "server busy", "type": "rate_limit"}}
            return web.json_response(body, status=429, headers={"Retry-After": "0.2"})
        self.busy += 1
        try:
            return await super()._chat(request)
        finally:
            self.busy -= 1


def dying_after(n: int) -> tuple[ScriptedUpstream, asyncio.Event]:
    """An upstream that stops serving (its port closed) at its `n`-th chat call, which
    never gets an answer."""
    died = asyncio.Event()
    up: ScriptedUpstream

    async def gate(seen: dict[str, Any]) -> None:
        if len(up.chat_requests) >= n:
            if not died.is_set():
                died.set()
                asyncio.get_running_loop().create_task(up.stop())
            await asyncio.Event().wait()  # cancelled when the server shuts down

    up = ScriptedUpstream(policy=kv_policy, gate=gate)
    return up, died


def batch_spec(*ups: ScriptedUpstream) -> Any:
    tasks = [
        {"id": f"t{i}", "data": {"goal": {"a": str(i), "b": str(i + 1)}}} for i in range(N_EPISODES)
    ]
    return parse_spec(
        {
            "name": f"fleet-{uuid.uuid4().hex[:6]}",
            "env": "kv-store",
            "tasks": tasks,
            "max_turns": 4,
            "harness": {"command": "{python} -m episodes.harness.reference.llm --max-steps 8"},
            "model": {
                "upstreams": [{"base_url": u.base_url} for u in ups],
                "model": "scripted",
                "retries": 2,
            },
        }
    )


async def test_a_batch_over_a_fleet_with_a_slow_a_dying_and_a_429_upstream(client, worker):
    throttling = Throttling(policy=kv_policy, delay_s=0.3)  # calls overlap there
    throttling.fail(1, 429)  # the first session routed here (the first listed) waits once
    dying, died = dying_after(2)
    fast = ScriptedUpstream(policy=kv_policy)
    slow = ScriptedUpstream(policy=kv_policy, delay_s=SLOW_S)
    ups = [throttling, dying, fast, slow]
    for u in ups:
        await u.start()
    try:
        urls = {
            u.base_url: name for u, name in zip(ups, ["429", "dying", "fast", "slow"], strict=True)
        }
        episodes = EpisodesClient(client, task_queue="episodes-test")
        spec = batch_spec(*ups)
        results = [r async for r in episodes.run_batch(spec, concurrency=CONCURRENCY)]
        calls = {
            r.workflow_id: (await episodes.transcript(r.workflow_id)).model_calls() for r in results
        }
    finally:
        for u in ups:
            await u.stop()
    served = {name: 0 for name in urls.values()}
    for cs in calls.values():
        for c in cs:
            served[urls[c.upstream or ""]] += 1
    print(f"\n  calls served: {served}; 429s answered: {throttling.refused + 1}")

    assert len(results) == N_EPISODES
    assert [r.termination for r in results] == ["env_done"] * N_EPISODES, [
        (r.termination, r.error) for r in results
    ]
    assert all(r.reward == 1.0 for r in results)
    assert died.is_set()  # it did die mid-batch
    for wid, cs in calls.items():
        assert cs and all(c.status == 200 for c in cs), wid
        names = [urls[c.upstream or ""] for c in cs]
        # One upstream, or the dead one first and then one other.
        moved = [n for n in names if n != names[0]]
        if moved:
            assert names[0] == "dying" and len(set(moved)) == 1, names
            assert names == [names[0]] * (len(names) - len(moved)) + moved, names
    # Each session's X-Session-ID reached one live upstream (the same id after a move).
    where: dict[str, set[str]] = {}
    for u in ups:
        for r in u.chat_requests:
            where.setdefault(r["headers"]["X-Session-ID"], set()).add(urls[u.base_url])
    assert len(where) == N_EPISODES
    assert all(len(names - {"dying"}) <= 1 for names in where.values()), where
    # The 429 server delayed calls (one was answered only on a later attempt) and
    # failed none: every call it served is a success in its episode's record.
    on_429 = [c for cs in calls.values() for c in cs if urls[c.upstream or ""] == "429"]
    assert on_429 and max(c.attempts for c in on_429) > 1
    # Least-loaded routing: the slow upstream holds each call SLOW_S, so while one of its
    # sessions waits its load is 1 and a new session goes to one less loaded; one lands
    # there only when every other is as loaded (the first burst). The fast one takes its
    # share of that burst and most later sessions: several times the slow one's calls.
    assert served["fast"] > served["slow"], served
