"""Many sessions' proxies serving concurrent calls on one loop (a worker's), issue 22.

Every call is recorded once, in order, in its own session's record (whole conversations
read back equal to what was sent); every upstream request carries its own session's
id; a session's token is refused by every other session's proxy.
"""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest

from episodes.model.scripted.server import ScriptedUpstream, echo_policy
from episodes.session.services import AgentServices
from episodes.types.events import resolve_model_calls
from episodes.types.model import ModelSpec

pytestmark = pytest.mark.timeout(120)

SESSIONS, CALLS = 24, 8


@pytest.mark.parametrize("stream", [False, True])
async def test_concurrent_sessions_record_their_own_calls_once_in_order(runtime, stream):
    async with ScriptedUpstream(policy=echo_policy) as upstream:
        spec = ModelSpec(base_url=upstream.base_url, model="m")
        services = [AgentServices(None, spec, session_id=f"sess-{i}") for i in range(SESSIONS)]
        records: list[list] = []
        try:
            for s in services:
                await s.start(runtime)
                records.append([])
                s.begin_turn(records[-1])
            sent: list[list[list]] = [[] for _ in services]

            async def agent(i: int) -> None:
                env = services[i].harness_env
                client = openai.AsyncOpenAI(
                    base_url=env["OPENAI_BASE_URL"], api_key=env["OPENAI_API_KEY"], max_retries=0
                )
                messages: list[dict] = [{"role": "system", "content": f"agent {i}"}]
                async with client:
                    for j in range(CALLS):
                        messages.append({"role": "user", "content": f"s{i} c{j}"})
                        sent[i].append([dict(m) for m in messages])
                        if stream:  # forwarded from the upstream's socket, piece by piece
                            text = ""
                            async for chunk in await client.chat.completions.create(
                                model="x", messages=messages, stream=True
                            ):
                                if chunk.choices and chunk.choices[0].delta.content:
                                    text += chunk.choices[0].delta.content
                        else:
                            answer = await client.chat.completions.create(
                                model="x", messages=messages
                            )
                            text = answer.choices[0].message.content or ""
                        assert text == f"you said: s{i} c{j}"
                        messages.append({"role": "assistant", "content": text})
                        await asyncio.sleep(0)

            await asyncio.gather(*(agent(i) for i in range(SESSIONS)))
            for s in services:
                s.end_turn()
            total = len(upstream.chat_requests)

            # A session's token on every other session's proxy: refused, never forwarded.
            async with httpx.AsyncClient() as http:
                for i, s in enumerate(services):
                    other = services[(i + 1) % SESSIONS].harness_env["OPENAI_BASE_URL"]
                    resp = await http.post(
                        other + "/chat/completions",
                        json={"messages": [{"role": "user", "content": "steal"}]},
                        headers={"Authorization": f"Bearer {s.harness_env['OPENAI_API_KEY']}"},
                    )
                    assert resp.status_code == 401
        finally:
            for s in services:
                await s.stop()
    assert total == SESSIONS * CALLS == len(upstream.chat_requests)
    for i, events in enumerate(records):
        calls = resolve_model_calls(events)
        assert len(events) == len(calls) == CALLS  # each call once, nothing else
        assert [c.messages for c in calls] == sent[i]  # in order, its own conversation
        assert all(c.ok and c.stream is stream for c in calls)
    by_session: dict[str, list[str]] = {}
    for r in upstream.chat_requests:
        last = r["body"]["messages"][-1]["content"]
        by_session.setdefault(r["headers"]["X-Session-ID"], []).append(last)
    assert by_session == {
        f"sess-{i}": [f"s{i} c{j}" for j in range(CALLS)] for i in range(SESSIONS)
    }
