"""SIGTERM drains a worker: no new provisions, short episodes finish, the rest fail fast."""

from __future__ import annotations

import asyncio
import contextlib
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
from tests.workers.test_worker_kill import _progress

pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.timeout(180)]

# A's drain timeout: never reached here (nothing races with it); a second SIGTERM ends
# A's drain once the test has seen what it checks. B's is short: its one live session
# never ends, so its drain ends at the timeout whatever the load.
GRACE_S = 600.0
B_GRACE_S = 1.0


async def _turn_done(client, wid: str) -> bool:
    p = await _progress(client, wid)
    return p is not None and p.turns_done >= 1 and p.status == "running"


async def test_sigterm_drains_then_abandons_what_is_left(chaos_server, chaos_client, tmp_path):
    """SIGTERM drains A: its short episodes finish on it, none of the queued ones start
    there (B takes them); a second SIGTERM abandons the hanging one (`worker_lost`,
    the error says so) and A exits 0 leaving no harness. B's drain timeout passes with a
    session that never ends: abandoned too, said in B's last line, B exits 0."""
    queue, tag = f"drain-{uuid.uuid4().hex[:6]}", new_tag()
    command = ["{python}", str(HARNESS), "log", "delay=0.4", f"tag={tag}"]
    first = {f"a{i}": turns(f"a{i}", 6) for i in range(3)}
    first["long"] = [*turns("long", 1), "long:1:hang"]  # never answers turn 1
    later = {f"b{i}": turns(f"b{i}", 6) for i in range(8)}
    name = f"drain-{uuid.uuid4().hex[:6]}"
    s1 = script_spec(name, first, command, turn_timeout_s=600)
    s2 = script_spec(name, later, command)
    hanging = {"hang": [*turns("hang", 1), "hang:1:hang"]}
    s3 = script_spec(f"{name}-b", hanging, command, turn_timeout_s=600)

    a = WorkerProc(chaos_server.address, queue, tmp_path / "a.log", 4, GRACE_S).start()
    b = WorkerProc(chaos_server.address, queue, tmp_path / "b.log", 4, B_GRACE_S)
    hang = None
    try:
        await a.ready()
        ids1 = await start_all(chaos_client, queue, s1)
        # All four run on A (the only worker): wait for their harnesses.
        assert await wait_until(lambda: len(a.children()) >= 4, timeout=120), a.text()
        ids2 = await start_all(chaos_client, queue, s2)  # queued: A is full
        await asyncio.sleep(0.5)

        signalled = time.time()
        a.signal(signal.SIGTERM)
        # A's short episodes finish on A while it drains...
        short = [episode_id(s1, t) for t in first if t != "long"]
        done = await wait_closed(chaos_client, short, timeout_s=180)
        assert len(done) == 3
        # ... and A, with room again, takes none of the queued ones: give it the chance.
        await asyncio.sleep(1.0)
        b.start()
        await b.ready()
        closed = await wait_closed(chaos_client, ids2, timeout_s=180)
        assert len(closed) == len(ids2), "every queued episode closes on B"
        long_id = episode_id(s1, "long")
        assert long_id not in await wait_closed(chaos_client, [long_id], timeout_s=0.1)
        a.signal(signal.SIGTERM)  # the second: abandon the hanging one now
        assert long_id in await wait_closed(chaos_client, [long_id], timeout_s=120)
        exit_code = a.wait(120)
        by_id = await results(chaos_client, ids1 + ids2)

        outcome = {wid: r.termination for wid, r in by_id.items()}
        print(f"\ndrain: outcomes {outcome}")
        lost = by_id[long_id]
        assert lost.termination == "worker_lost", lost
        assert "stopped at once (a second stop signal)" in (lost.error or ""), lost.error
        assert "the session was abandoned" in (lost.error or ""), lost.error
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
        assert "abandoning" in log and long_id in log, log
        last = " ".join(log.split()[-40:])  # its last line, as rich wrapped it
        assert "abandoned 1 session(s): it was stopped at once" in last, last
        print(f"drain: A exited {exit_code} {time.time() - signalled:.1f} s after SIGTERM")

        # B's drain timeout: its one session never ends, so the timeout ends the drain.
        [hang] = await start_all(chaos_client, queue, s3)
        assert await wait_until(lambda: _turn_done(chaos_client, hang), timeout=120), b.text()
        b.signal(signal.SIGTERM)
        assert b.wait(120) == 0, b.text()
        last = " ".join(b.text().split()[-40:])
        assert f"abandoned 1 session(s): its drain timeout ({B_GRACE_S:g} s) passed" in last, last
        assert await wait_until(lambda: not tagged_processes(tag), timeout=20), "orphans"
    finally:
        a.kill()
        b.kill()
        if hang is not None:  # no worker is left to end it
            with contextlib.suppress(Exception):
                await chaos_client.get_workflow_handle(hang).terminate("test over")
