"""SIGTERM drains a worker: no new provisions, short episodes finish, the rest fail fast."""

from __future__ import annotations

import asyncio
import signal
import time
import uuid

import pytest

from tests.support.chaos.helpers import (
    HARNESS,
    WorkerProc,
    episode_id,
    new_tag,
    provisions,
    results,
    script_spec,
    start_all,
    tagged_processes,
    turns,
    wait_closed,
)
from tests.support.helpers import wait_until

pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.timeout(180)]

# The short episodes (6 turns of 0.4 s) must finish within it on a loaded machine.
GRACE_S = 30.0


async def test_sigterm_drains_then_abandons_what_is_left(chaos_server, chaos_client, tmp_path):
    queue, tag = f"drain-{uuid.uuid4().hex[:6]}", new_tag()
    command = ["{python}", str(HARNESS), "log", "delay=0.4", f"tag={tag}"]
    first = {f"a{i}": turns(f"a{i}", 6) for i in range(3)}
    first["long"] = [*turns("long", 1), "long:1:hang"]  # never answers turn 1
    later = {f"b{i}": turns(f"b{i}", 6) for i in range(8)}
    name = f"drain-{uuid.uuid4().hex[:6]}"
    s1 = script_spec(name, first, command, turn_timeout_s=120)
    s2 = script_spec(name, later, command)

    a = WorkerProc(chaos_server.address, queue, tmp_path / "a.log", 4, GRACE_S).start()
    b = WorkerProc(chaos_server.address, queue, tmp_path / "b.log", 4)
    try:
        await a.ready()
        ids1 = await start_all(chaos_client, queue, s1)
        # All four run on A (the only worker): wait for their harnesses.
        assert await wait_until(lambda: len(a.children()) >= 4, timeout=60), a.text()
        ids2 = await start_all(chaos_client, queue, s2)  # queued: A is full
        await asyncio.sleep(0.5)

        signalled = time.time()
        a.signal(signal.SIGTERM)
        # A's short episodes finish on A within the grace period...
        short = [episode_id(s1, t) for t in first if t != "long"]
        done = await wait_closed(chaos_client, short, timeout_s=GRACE_S + 20)
        assert len(done) == 3
        # ... and A, with room again, takes none of the queued ones: give it the chance.
        await asyncio.sleep(1.0)
        b.start()
        await b.ready()
        closed = await wait_closed(chaos_client, ids1 + ids2, timeout_s=90)
        assert len(closed) == len(ids1 + ids2), "every episode closes"
        exit_code = a.wait(GRACE_S + 30)
        by_id = await results(chaos_client, ids1 + ids2)

        outcome = {wid: r.termination for wid, r in by_id.items()}
        print(f"\ndrain: outcomes {outcome}")
        lost = by_id[episode_id(s1, "long")]
        assert lost.termination == "worker_lost", lost
        assert "drain timeout" in (lost.error or ""), lost.error
        assert all(by_id[w].termination == "env_done" for w in short + ids2), outcome
        assert all(by_id[w].reward == 1.0 for w in short + ids2), outcome

        # From the histories: A's provisions all started before the signal, B took the rest.
        starts = {wid: await provisions(chaos_client, wid) for wid in ids1 + ids2}
        on_a = {w for w, ps in starts.items() if any(p[0].startswith(a.worker_id) for p in ps)}
        assert on_a == set(ids1), starts
        late = [(w, p) for w, ps in starts.items() for p in ps if p[0].startswith(a.worker_id)]
        assert all(p[2] < signalled for _, p in late), (signalled, late)
        assert all(p[0].startswith(b.worker_id) for w in ids2 for p in starts[w]), starts

        assert exit_code == 0, a.text()
        log = a.text()
        assert "abandoning" in log and episode_id(s1, "long") in log, log
        print(f"drain: A exited {exit_code} {time.time() - signalled:.1f} s after SIGTERM")
        assert await wait_until(lambda: not tagged_processes(tag), timeout=20), "orphans"
        b.signal(signal.SIGTERM)
        assert b.wait(60) == 0, b.text()
    finally:
        a.kill()
        b.kill()
