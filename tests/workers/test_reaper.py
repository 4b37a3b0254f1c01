"""The worker's reaper against live sessions: its idle TTL is a backstop for sessions
nobody uses, never for one that is working or legitimately waiting (issue 19).

Real dev server, real worker, real harness processes. An hour of idleness is simulated
by moving the session's `last_used` back, then one reaper pass is run by hand: the
verdict depends on no clock and no background pass timing.
"""

from __future__ import annotations

import uuid

from episodes.client import EpisodesClient
from tests.conftest import scripted_command
from tests.support.helpers import spec, wait_until

QUEUE = "episodes-test"
HOUR = 3600.0


def _client(client) -> EpisodesClient:  # type: ignore[no-untyped-def]
    return EpisodesClient(client, task_queue=QUEUE)


def _entry(worker, workflow_id: str):  # type: ignore[no-untyped-def]
    for entry in worker.registry.entries():
        if entry.workflow_id == workflow_id:
            return entry
    return None


async def test_an_interactive_pause_within_idle_timeout_is_not_reaped(client, worker) -> None:
    ttl = worker.options.session_idle_ttl_s
    s = spec(name=f"reap-pause-{uuid.uuid4().hex[:6]}")
    # The trainer may pause up to 3 TTLs between steps (a slow rollout, an eval).
    session = await _client(client).open_session(s, s.tasks[0], idle_timeout_s=3 * ttl)
    try:
        await session.step("a")
        entry = _entry(worker, session.workflow_id)
        assert entry is not None
        entry.session.last_used -= 2 * ttl  # two TTLs of pause: within idle_timeout_s
        await worker.reap_once()
        assert _entry(worker, session.workflow_id) is entry
        assert (await session.step("b")).reply == "b"  # the session is alive
        # Past its own bound it is reaped all the same: the TTL is extended, not gone.
        entry.session.last_used -= 4 * ttl
        await worker.reap_once()
        assert _entry(worker, session.workflow_id) is None
    finally:
        await session.handle.cancel()


async def test_a_session_with_a_turn_in_flight_is_not_reaped(client, worker) -> None:
    ttl = worker.options.session_idle_ttl_s
    s = spec(
        name=f"reap-busy-{uuid.uuid4().hex[:6]}",
        command=scripted_command("hang", "turn=0"),
        turn_timeout_s=3 * ttl,  # a turn may legitimately outlast the TTL
    )
    handle = await _client(client).start_episode(s, s.tasks[0])
    try:
        assert await wait_until(lambda: _entry(worker, handle.id) is not None, timeout=60)
        entry = _entry(worker, handle.id)
        assert await wait_until(lambda: entry.session.busy, timeout=60)  # the drive's turn 0
        entry.session.last_used -= 2 * ttl
        await worker.reap_once()
        assert _entry(worker, handle.id) is entry
    finally:
        await handle.cancel()
