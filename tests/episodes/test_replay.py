"""Exact replay: a restored session's model and tool calls answered from the record.

Real parts: the LLM harness (the official `openai` SDK, one conversation across turns)
as a real process, the scripted upstream as a real HTTP server counting the requests it
gets, the session's real proxy and bridge. The policy samples a fresh word per call, so
a call that reached the upstream again could never reproduce the recorded reply.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from episodes.model.proxy import ModelProxy
from episodes.model.scripted.server import ScriptedUpstream
from episodes.replay import Replay
from episodes.session.live import LiveSession
from episodes.types.model import ModelSpec
from episodes.types.spec import parse_spec
from tests.support.notebook import sampling_policy

pytestmark = pytest.mark.timeout(120)


def _spec(base_url: str, env: str, *, stream: bool = False) -> Any:
    flag = " --stream" if stream else ""
    return parse_spec(
        {
            "name": "replay",
            "env": f"tests.support.notebook:{env}",
            "tasks": [{"id": "t"}],
            "max_turns": 4,
            "harness": {"command": "{python} -m episodes.harness.reference.llm" + flag},
            "model": {"base_url": base_url, "model": "scripted", "token_data": True},
        }
    )


@pytest.mark.parametrize("stream", [False, True])
async def test_restore_answers_model_and_tool_calls_from_the_record(stream: bool) -> None:
    async with ScriptedUpstream(policy=sampling_policy) as upstream:
        spec = _spec(upstream.base_url, "DeterministicNotebook", stream=stream)
        first = LiveSession(spec, spec.tasks[0], 0, "s-first")
        try:
            await first.open()
            records = [(await first.turn(n)).record for n in range(3)]
        finally:
            await first.close()
        sent = len(upstream.chat_requests)
        assert sent == 6  # a note and a reply per turn
        second = LiveSession(spec, spec.tasks[0], 0, "s-second")
        try:
            await second.open()
            divergent, _ = await second.restore(records)
            # Not one request reached the upstream for the replayed turns ...
            assert len(upstream.chat_requests) == sent
            assert divergent == []
            # ... and the deterministic tools ran again: the env's state is rebuilt.
            assert second.env.notes == first.env.notes == ["note m0", "note m1", "note m2"]
            live = await second.turn(3)
        finally:
            await second.close()
    assert len(upstream.chat_requests) == sent + 2  # turn 3 went live
    # The live turn's first prompt extends the recorded conversation exactly.
    recorded = upstream.served[5]
    resumed = upstream.served[6]
    assert (
        resumed["prompt_token_ids"][: len(recorded["prompt_token_ids"])]
        == recorded["prompt_token_ids"]
    )
    assert live.record.reply.startswith("ok ")


async def test_tools_of_an_undeclared_env_are_answered_from_the_record_not_run() -> None:
    async with ScriptedUpstream(policy=sampling_policy) as upstream:
        spec = _spec(upstream.base_url, "Notebook")
        first = LiveSession(spec, spec.tasks[0], 0, "s-first")
        try:
            await first.open()
            records = [(await first.turn(n)).record for n in range(2)]
        finally:
            await first.close()
        second = LiveSession(spec, spec.tasks[0], 0, "s-second")
        try:
            await second.open()
            divergent, _ = await second.restore(records)
            notes = list(second.env.notes)
        finally:
            await second.close()
    assert divergent == []
    assert notes == []  # answered "noted #1", "noted #2" from the record, never run


async def test_a_request_off_the_record_diverges_and_goes_live() -> None:
    async with ScriptedUpstream(policy=sampling_policy) as upstream:
        spec = _spec(upstream.base_url, "DeterministicNotebook")
        first = LiveSession(spec, spec.tasks[0], 0, "s-first")
        try:
            await first.open()
            records = [(await first.turn(n)).record for n in range(2)]
        finally:
            await first.close()
        sent = len(upstream.chat_requests)
        # Turn 1 was sent another message: its calls are not the recorded ones.
        records[1] = records[1].model_copy(update={"message": "note something else"})
        second = LiveSession(spec, spec.tasks[0], 0, "s-second")
        try:
            await second.open()
            divergent, _ = await second.restore(records)
        finally:
            await second.close()
    assert divergent == [1]
    assert len(upstream.chat_requests) == sent + 2  # turn 1's two calls, live


async def test_on_divergence_fail_fails_the_restore() -> None:
    from episodes.errors import HarnessFailure

    async with ScriptedUpstream(policy=sampling_policy) as upstream:
        spec = _spec(upstream.base_url, "DeterministicNotebook")
        spec = spec.model_copy(update={"on_divergence": "fail"})
        first = LiveSession(spec, spec.tasks[0], 0, "s-first")
        try:
            await first.open()
            records = [(await first.turn(0)).record]
        finally:
            await first.close()
        records[0] = records[0].model_copy(update={"message": "note something else"})
        second = LiveSession(spec, spec.tasks[0], 0, "s-second")
        try:
            await second.open()
            with pytest.raises(HarnessFailure, match="on_divergence: fail") as caught:
                await second.restore(records)
        finally:
            await second.close()
    assert caught.value.error_type == "harness_start_failed"


@pytest.mark.parametrize("on_divergence", ["live", "fail"])
async def test_a_turn_that_makes_fewer_calls_than_its_record_diverges_at_its_end(
    on_divergence: str,
) -> None:
    """Issue 40: calls were matched across turns and a turn's leftovers never checked, so
    a record whose turn 0 holds turn 1's calls too replayed without a divergence."""
    from episodes.errors import HarnessFailure

    async with ScriptedUpstream(policy=sampling_policy) as upstream:
        spec = _spec(upstream.base_url, "DeterministicNotebook")
        spec = spec.model_copy(update={"on_divergence": on_divergence})
        first = LiveSession(spec, spec.tasks[0], 0, "s-first")
        try:
            await first.open()
            records = [(await first.turn(n)).record for n in range(2)]
        finally:
            await first.close()
        # Turn 0's record holds its own calls and then turn 1's; turn 1's holds none.
        records[0] = records[0].model_copy(
            update={"events": [*records[0].events, *records[1].events]}
        )
        records[1] = records[1].model_copy(update={"events": []})
        second = LiveSession(spec, spec.tasks[0], 0, "s-second")
        try:
            await second.open()
            if on_divergence == "fail":
                with pytest.raises(HarnessFailure, match=r"turn 0.*on_divergence: fail"):
                    await second.restore(records)
            else:
                divergent, _ = await second.restore(records)
                assert divergent[:1] == [0], "blamed on the turn that made fewer calls"
        finally:
            await second.close()


# -- the proxy alone: byte for byte --------------------------------------------------------


async def _call(proxy: ModelProxy, body: dict[str, Any]) -> bytes:
    headers = {"Authorization": f"Bearer {proxy.token}"}
    async with httpx.AsyncClient() as http:
        r = await http.post(f"{proxy.base_url}/chat/completions", json=body, headers=headers)
        return r.content


@pytest.mark.parametrize("replay_bytes", [True, False])
async def test_the_proxy_replays_the_bytes_it_served(replay_bytes: bool) -> None:
    bodies = [
        {"messages": [{"role": "user", "content": "hi"}]},
        {"messages": [{"role": "user", "content": "hi"}], "stream": True},
    ]
    async with ScriptedUpstream(script=["one two", "three four", "five"]) as upstream:
        spec = ModelSpec(
            base_url=upstream.base_url, model="m", token_data=True, replay_bytes=replay_bytes
        )
        events: list[Any] = []
        async with ModelProxy(spec, on_call=events.append) as live:
            served = [await _call(live, b) for b in bodies]
        # Through the history: what a restore reads back is JSON.
        events = json.loads(json.dumps(events))
        replay = Replay([events])  # one turn
        again: list[Any] = []
        async with ModelProxy(spec, on_call=again.append) as proxy:
            proxy.replay = replay
            replayed = [await _call(proxy, b) for b in bodies]
            assert len(upstream.chat_requests) == 2 and again == []
            off = await _call(proxy, {"messages": [{"role": "user", "content": "other"}]})
    assert len(upstream.chat_requests) == 3 and replay.divergences == 1
    assert json.loads(off)["choices"][0]["message"]["content"] == "five"
    assert replayed[0] == served[0]  # the scripted server's JSON re-encodes byte for byte
    if replay_bytes:
        assert replayed[1] == served[1]
    else:  # the same answer, folded into one chunk: same text, ids and logprobs
        from episodes.model.stream import assemble, stream_chunks

        def folded(raw: bytes) -> dict[str, Any]:
            response = assemble(stream_chunks(raw)[0])
            return {k: response[k] for k in ("choices", "prompt_token_ids", "usage")}

        assert folded(replayed[1]) == folded(served[1])
