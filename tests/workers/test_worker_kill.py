"""SIGKILL one of two workers mid-batch: its episodes end `worker_lost`, found by the lost-worker timeouts,
the others complete, nothing is stuck and no harness outlives its worker."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from episodes import contract
from episodes.types.io import EpisodeProgress
from tests.support.chaos.helpers import (
    HARNESS,
    WorkerProc,
    assert_killed_and_survivor_leave_nothing,
    containers_of,
    docker_api,
    lost_timeouts,
    new_tag,
    provisions,
    results,
    script_spec,
    start_all,
    turns,
    wait_closed,
)
from tests.support.helpers import wait_until

pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.timeout(180)]

EPISODES, TURNS, HELD, LOST_S = 40, 8, 2, 3.0


async def _progress(client, wid: str) -> EpisodeProgress | None:
    with contextlib.suppress(Exception):
        return await client.get_workflow_handle(wid).query("progress", result_type=EpisodeProgress)
    return None


async def _on_worker(client, wid: str, worker_id: str) -> str:
    """Where the episode stands with the worker: `provisioning` (a provision of it in
    flight there), `held` (its session is there, running, a turn or more done), `other`."""
    desc = await client.get_workflow_handle(wid).describe()
    for pa in desc.raw_description.pending_activities:
        if pa.activity_type.name == contract.PROVISION and pa.last_worker_identity.startswith(
            worker_id
        ):
            return "provisioning"
    p = await _progress(client, wid)
    held = p is not None and p.session is not None and p.session.worker_id == worker_id
    return "held" if held and p.status == "running" and p.turns_done >= 1 else "other"


async def _mid_flight_on(
    client, ids: list[str], worker_id: str, at_least: int, seen: dict[str, int]
) -> bool:
    """`at_least` episodes run turns on the worker and none is provisioning there (a
    provision in flight on the killed worker is retried on the other: see the test of
    that below; here each episode's holder must be plain). `seen`: the last count of each
    state, for the failure's message."""
    states = await asyncio.gather(*(_on_worker(client, wid, worker_id) for wid in ids))
    seen.clear()
    seen.update(Counter(states))
    return seen.get("provisioning", 0) == 0 and seen.get("held", 0) >= at_least


def _policy_spec(policy: str, name: str, tasks, command, gate: Path):
    # The default sandbox, with the gate's folder bound in: the harness reads the hold file.
    runtime = {"type": "subprocess", "ro_paths": [str(gate)]}
    return script_spec(name, tasks, command, on_worker_lost=policy, harness={"runtime": runtime})


@pytest.mark.parametrize(
    "policy",
    ["fail", "restart"],
)
async def test_sigkill_one_of_two_workers_mid_batch(chaos_server, chaos_client, tmp_path, policy):
    queue, tag = f"kill-{uuid.uuid4().hex[:6]}", new_tag()
    # Every episode waits at its turn HELD until the hold file goes: the kill finds A's
    # episodes mid-flight however slow the machine (no window to hit).
    gate = tmp_path / "gate"
    gate.mkdir()
    hold = gate / "hold"
    hold.touch()
    command = ["{python}", str(HARNESS), "log", "delay=0.1", f"hold={hold}", f"tag={tag}"]
    tasks = {f"t{i:02d}": turns(f"t{i:02d}", TURNS) for i in range(EPISODES)}
    for messages in tasks.values():
        messages[HELD] += ":held"
    spec = _policy_spec(policy, f"kill-{uuid.uuid4().hex[:6]}", tasks, command, gate)
    spec = spec.model_copy(update={"worker_lost_timeout_s": LOST_S})
    # Half the batch each: a busy machine must not let one worker take it all.
    half = EPISODES // 2
    a = WorkerProc(chaos_server.address, queue, tmp_path / "a.log", half).start()
    b = WorkerProc(chaos_server.address, queue, tmp_path / "b.log", half).start()
    try:
        await a.ready()
        await b.ready()
        ids = await start_all(chaos_client, queue, spec)
        # Mid-batch: A holds many episodes, each waiting at its held turn.
        seen: dict[str, int] = {}
        assert await wait_until(
            lambda: _mid_flight_on(chaos_client, ids, a.worker_id, half // 2, seen), timeout=90
        ), f"worker A never held {half // 2} episodes mid-flight; last seen: {seen}"
        on_a_now = a.children()
        b.children()
        assert on_a_now, "worker A should hold harnesses"

        killed = time.time()
        a.signal(signal.SIGKILL)
        assert a.wait(10) == -signal.SIGKILL
        hold.unlink()  # B's episodes (and, restarted, A's) go on
        closed = await wait_closed(chaos_client, ids, timeout_s=90)
        assert len(closed) == EPISODES, f"stuck: {sorted(set(ids) - set(closed))}"
        by_id = await results(chaos_client, ids)

        holder = {}
        for wid in ids:
            [(identity, _, _)] = (await provisions(chaos_client, wid))[:1] or [("?", 0, 0)]
            holder[wid] = "A" if identity.startswith(a.worker_id) else "B"
        on_a = [w for w in ids if holder[w] == "A"]
        on_b = [w for w in ids if holder[w] == "B"]
        before = [w for w in ids if closed[w] <= killed]
        hit = [w for w in on_a if closed[w] > killed]
        detect = sorted(round(closed[w] - killed, 2) for w in hit)
        counts = {
            t: sum(r.termination == t for r in by_id.values()) for t in ("env_done", "worker_lost")
        }
        print(
            f"\nkill[{policy}]: {EPISODES} episodes, {len(on_a)} on A, {len(on_b)} on B, "
            f"{len(before)} done before the kill; outcomes {counts}; kill -> close of A's "
            f"{len(hit)}: min {detect[0] if detect else '-'} s, max {detect[-1] if detect else '-'} s"
        )
        assert hit, "the kill should hit episodes in flight"
        assert all(by_id[w].termination == "env_done" and by_id[w].reward == 1.0 for w in on_b)
        assert not before, "the hold file should keep every episode mid-flight until the kill"
        if policy == "fail":
            assert all(by_id[w].termination == "worker_lost" for w in hit), by_id
            assert all("lost the session" in (by_id[w].error or "") for w in hit)
            # Found by the timeouts worker_lost_timeout_s bounds (so within about twice
            # it: the figures are printed above), not by a longer one.
            for w in hit:
                assert await lost_timeouts(chaos_client, w) >= 1, w
        else:  # handed over: every episode completes with a clean run's transcript
            assert all(by_id[w].termination == "env_done" for w in hit), by_id
            assert all(by_id[w].reward == 1.0 and by_id[w].turns == TURNS for w in hit)

        # No harness outlives its worker, and none is left on B.
        await assert_killed_and_survivor_leave_nothing(a, b, tag)
        api, _ = docker_api()
        if api is not None:  # no container of A's either (there should be none)
            assert containers_of(api, a.worker_id) == []
    finally:
        a.kill()
        b.kill()


async def _provisions_started_on(client, ids: list[str], worker_id: str) -> bool:
    """Every episode's provision is running on the worker (started, not yet done)."""
    for wid in ids:
        desc = await client.get_workflow_handle(wid).describe()
        started = [
            pa
            for pa in desc.raw_description.pending_activities
            if pa.activity_type.name == contract.PROVISION
            and pa.last_worker_identity.startswith(worker_id)
            and pa.HasField("last_started_time")
        ]
        if not started:
            return False
    return True


async def test_sigkill_mid_provision_retries_the_provision_on_another_worker(
    chaos_server, chaos_client, tmp_path
):
    """A worker killed while its harnesses start: the provisions stop heartbeating, are
    retried on the other worker after `worker_lost_timeout_s`, and the episodes complete
    (before, they waited out the provision's start-to-close: ready_timeout_s + 300 s)."""
    queue, tag, start_s, n = f"kill-{uuid.uuid4().hex[:6]}", new_tag(), 20.0, 3
    command = ["{python}", str(HARNESS), "log", f"start={start_s}", f"tag={tag}"]
    tasks = {f"p{i}": turns(f"p{i}", 2) for i in range(n)}
    spec = script_spec(f"kill-prov-{uuid.uuid4().hex[:6]}", tasks, command)
    # The slow start outlasts B's own start (it took over 6 s under load), so the kill
    # lands while A's harnesses still start.
    harness = spec.harness.model_copy(update={"ready_timeout_s": 120.0})
    spec = spec.model_copy(update={"worker_lost_timeout_s": LOST_S, "harness": harness})
    a = WorkerProc(chaos_server.address, queue, tmp_path / "a.log").start()
    b = WorkerProc(chaos_server.address, queue, tmp_path / "b.log")
    try:
        await a.ready()
        ids = await start_all(chaos_client, queue, spec)
        # Only A polls: every provision starts there, its harness still in its slow start.
        assert await wait_until(
            lambda: _provisions_started_on(chaos_client, ids, a.worker_id), timeout=30
        )
        # The server marks a provision started when A takes its task, a moment before A
        # spawns its box: wait for the harnesses (each sleeps start_s before it is ready).
        assert await wait_until(a.children, timeout=30), "worker A should be starting harnesses"
        await b.start().ready()
        killed = time.time()
        a.signal(signal.SIGKILL)
        assert a.wait(10) == -signal.SIGKILL
        # Detection (LOST_S) + a fresh slow start on B + two turns, with slack.
        bound = LOST_S + start_s + 30
        closed = await wait_closed(chaos_client, ids, timeout_s=bound)
        assert len(closed) == n, f"stuck: {sorted(set(ids) - set(closed))}"
        by_id = await results(chaos_client, ids)
        waits = sorted(round(closed[w] - killed, 1) for w in ids)
        print(f"\nkill mid-provision: {n} episodes closed {waits} s after the kill")
        for wid in ids:
            assert by_id[wid].termination == "env_done" and by_id[wid].reward == 1.0, by_id[wid]
            [(identity, attempt, _)] = await provisions(chaos_client, wid)
            assert identity.startswith(b.worker_id) and attempt >= 2, (identity, attempt)
        # The harnesses A was starting died with it; B leaves none either.
        await assert_killed_and_survivor_leave_nothing(a, b, tag)
    finally:
        a.kill()
        b.kill()
