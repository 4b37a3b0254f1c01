"""SIGKILL the worker under an interactive session (`on_worker_lost: restart`): the
trainer's next step waits while a new session on the other worker replays the recorded
steps, then answers; the session ends as a clean run would, nothing left behind."""

from __future__ import annotations

import json
import signal
import time
import uuid

import pytest

from episodes.client import EpisodesClient
from tests.support.chaos.helpers import (
    HARNESS,
    TRUSTED,
    WorkerProc,
    assert_killed_and_survivor_leave_nothing,
    new_tag,
    script_spec,
)

pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.timeout(180)]

LOST_S = 3.0
MESSAGES = [f"p:{i}" for i in range(4)]


def _seen(folder) -> list[tuple[int, str, int]]:
    """(turn, message, pid) of every turn packet a harness received, in order."""
    lines = (folder / "p.log").read_text().splitlines()
    return [(d["turn"], d["message"], d["pid"]) for d in map(json.loads, lines)]


async def test_sigkill_under_an_interactive_session_restarts_it_on_the_other_worker(
    chaos_server, chaos_client, tmp_path
):
    queue, tag = f"ikill-{uuid.uuid4().hex[:6]}", new_tag()
    seen = tmp_path / "seen"
    seen.mkdir()
    command = ["{python}", str(HARNESS), "log", f"dir={seen}", f"tag={tag}"]
    spec = script_spec(
        f"ikill-{uuid.uuid4().hex[:6]}",
        {"p": MESSAGES},
        command,
        on_worker_lost="restart",
        worker_lost_timeout_s=LOST_S,
        harness=TRUSTED,
    )
    a = WorkerProc(chaos_server.address, queue, tmp_path / "a.log").start()
    b = WorkerProc(chaos_server.address, queue, tmp_path / "b.log")
    try:
        await a.ready()  # only A polls: the session opens there
        client = EpisodesClient(chaos_client, task_queue=queue)
        session = await client.open_session(spec, spec.load_tasks()[0])
        assert session.first_observation == "p:0"
        for i in (0, 1):
            reply = await session.step(MESSAGES[i])
            assert (reply.turn, reply.reply, reply.done) == (i, MESSAGES[i], False)
        progress = await session.progress()
        assert progress.session is not None and progress.session.worker_id == a.worker_id
        assert a.children(), "worker A should hold the harness"

        await b.start().ready()
        a.signal(signal.SIGKILL)
        assert a.wait(10) == -signal.SIGKILL
        killed = time.monotonic()
        # The step waits out the detection and the replay on B, then runs its turn there.
        reply = await session.step(MESSAGES[2])
        waited = time.monotonic() - killed
        assert (reply.turn, reply.reply, reply.done, reply.error) == (2, "p:2", False, None)
        last = await session.step(MESSAGES[3])
        assert last.done and last.termination == "env_done" and last.reward == 1.0
        result = await session.close()
        print(f"\ninteractive kill: step 2 answered {waited:.1f} s after the kill")

        assert result.termination == "env_done" and result.reward == 1.0
        assert (result.turns, result.restarts, result.turns_replayed) == (4, 1, 2)
        progress = await session.progress()
        assert [t.message for t in progress.turns] == MESSAGES
        assert progress.session is not None and progress.session.worker_id == b.worker_id
        # The harness on B saw the two recorded steps replayed, then the two new ones.
        turns = _seen(seen)
        first_pid = turns[0][2]
        on_b = [(t, m) for t, m, pid in turns if pid != first_pid]
        assert [(t, m) for t, m, pid in turns if pid == first_pid] == [(0, "p:0"), (1, "p:1")]
        assert on_b == list(enumerate(MESSAGES)), turns

        # A's harness died with A; B released its own at close.
        await assert_killed_and_survivor_leave_nothing(a, b, tag)
    finally:
        a.kill()
        b.kill()
