"""A call waiting for a place under an upstream's limit (fleet.py `Replica.acquire`)
ends cleanly whatever happens to it meanwhile: cancelled, its session closed, its
harness gone. It gives its place back and never stays in the replica's queue, where
it would count towards `saturated()` (and stop the worker taking episodes) for good."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import openai
import pytest

from episodes.model.fleet import Replica
from episodes.model.proxy import ModelProxy
from episodes.model.scripted.server import ScriptedUpstream, echo_policy
from episodes.model.sender import Exhausted, Sender
from episodes.types.model import ModelSpec
from tests.support.helpers import wait_until

pytestmark = pytest.mark.timeout(60)


def _one_at_a_time(up: ScriptedUpstream) -> ModelSpec:
    return ModelSpec(upstreams=[{"base_url": up.base_url, "max_concurrency": 1}], model="m")


async def test_a_cancelled_waiter_passed_over_by_a_release_leaves_cleanly():
    r = Replica("http://x/v1", ceiling=1)
    await r.acquire()
    waiter = asyncio.ensure_future(r.acquire())
    await asyncio.sleep(0)
    assert r.waiting == 1
    waiter.cancel()  # its future is cancelled now; the task runs its handler later
    r.release()  # ... and this wake pops that cancelled future first
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert (r.in_flight, r.waiting) == (0, 0)


async def test_a_call_waiting_when_its_sender_closes_ends_and_gives_its_place_back():
    async with ScriptedUpstream() as up:
        spec = _one_at_a_time(up)
        sender = Sender(spec, None, "s-closing", 0.01, 0.1)
        await sender.start()
        assert sender.route is not None
        (replica,) = sender.route.replicas
        await replica.acquire()  # another session's call holds the one place
        call = asyncio.ensure_future(sender.send({"model": "m", "messages": []}, read=True))
        assert await wait_until(lambda: replica.waiting == 1, timeout=10)
        await sender.close()
        # Not left in the queue until some other call frees the place.
        assert await wait_until(lambda: replica.waiting == 0, timeout=10)
        replica.release()
        with pytest.raises((Exhausted, asyncio.CancelledError)):
            await asyncio.wait_for(call, 10)
        assert (replica.in_flight, replica.waiting) == (0, 0)
        assert up.chat_requests == []


async def test_a_call_backing_off_when_its_sender_closes_does_not_route_again():
    async with ScriptedUpstream(policy=echo_policy) as up:
        up.fail(1, 429)
        sender = Sender(_one_at_a_time(up), None, "s-backing-off", 1.0, 1.0)
        await sender.start()
        assert sender.route is not None
        (replica,) = sender.route.replicas
        call = asyncio.ensure_future(sender.send({"model": "m", "messages": []}, read=True))
        assert await wait_until(lambda: replica.backing_off == 1, timeout=10)
        await sender.close()
        with pytest.raises(Exhausted, match="session is closed") as failed:
            await asyncio.wait_for(call, 10)
        assert failed.value.upstream == replica.name  # its last attempt's (the 429)
        assert (replica.sessions, replica.in_flight, replica.waiting) == (0, 0, 0)


async def test_a_waiting_call_whose_harness_left_ends_when_the_session_stops(caplog):
    """The harness gives up on a call that waits for a place (its client timed out) and
    its session stops: the call leaves the queue then, and when the place frees later
    nothing runs on for the closed session (no `KeyError` from a closed sender)."""
    release = asyncio.Event()

    async def gate(request: dict[str, Any]) -> None:
        await release.wait()

    caplog.set_level(logging.ERROR, logger="episodes.model.serve")
    async with ScriptedUpstream(policy=echo_policy, gate=gate) as up:
        spec = _one_at_a_time(up)
        holder = ModelProxy(spec, session_id="s-holder")
        leaver = ModelProxy(spec, session_id="s-leaver")
        try:
            async with holder:
                await leaver.start()
                assert leaver._sender.route is not None
                (replica,) = leaver._sender.route.replicas
                held = asyncio.ensure_future(_ask(holder))
                assert await wait_until(lambda: len(up.chat_requests) == 1, timeout=10)
                gone = asyncio.ensure_future(_ask(leaver))
                assert await wait_until(lambda: replica.waiting == 1, timeout=10)
                gone.cancel()  # the harness's client gives up: its connection closes
                with pytest.raises(asyncio.CancelledError):
                    await gone
                # The stop neither hangs on the call (it waits for a place another
                # session holds) nor leaves it behind.
                await asyncio.wait_for(leaver.stop(), 10)
                assert await wait_until(lambda: replica.waiting == 0, timeout=10)
                release.set()
                assert await asyncio.wait_for(held, 10)
                assert await wait_until(lambda: replica.in_flight == 0, timeout=10)
        finally:
            release.set()  # else the upstream's close waits on its gate
            await leaver.stop()
    assert len(up.chat_requests) == 1
    failed = [r for r in caplog.records if "request failed" in r.getMessage()]
    assert not failed, failed[0].exc_text


async def _ask(proxy: ModelProxy) -> str:
    env = proxy.env()
    c = openai.AsyncOpenAI(
        base_url=env["OPENAI_BASE_URL"], api_key=env["OPENAI_API_KEY"], max_retries=0
    )
    try:
        answer = await c.chat.completions.create(
            model="x", messages=[{"role": "user", "content": "hi"}]
        )
    finally:
        await c.close()
    return answer.choices[0].message.content or ""


async def test_an_unread_answer_names_its_replica_and_frees_its_place_from_any_task():
    """`send` hands back the call's replica and its place (once held in per-task context
    variables: another task read no replica and freed nothing, the place stayed taken)."""
    async with ScriptedUpstream(policy=echo_policy) as up:
        sender = Sender(_one_at_a_time(up), None, "s-handed", 0.01, 0.1)
        await sender.start()
        assert sender.route is not None
        (replica,) = sender.route.replicas
        try:
            call = await asyncio.create_task(
                sender.send({"model": "m", "messages": []}, read=False)
            )
            assert call.upstream == replica.name and call.attempts == 1
            assert replica.in_flight == 1  # held while the answer is forwarded
            await sender.read_closing(call.resp)
            call.release()
            call.release()  # once
            assert (replica.in_flight, replica.waiting) == (0, 0)
            read = await sender.send({"model": "m", "messages": []}, read=True)
            assert read.raw and read.upstream == replica.name and replica.in_flight == 0
            read.release()  # a read answer holds nothing
            assert replica.in_flight == 0
        finally:
            await sender.close()
