"""Group execution on a lost worker: real worker processes, the one running a group's
`run_group` SIGKILLed mid-group; the retry on the other restores every member from the
last heartbeat (its turns replayed exactly) and each member's turns stay exactly once."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from episodes import contract
from episodes.client import EpisodesClient
from episodes.client.connect import connect
from episodes.client.histories.transcript import load_transcript
from episodes.errors import EpisodesError
from episodes.types.group import member_id
from tests.conftest import ROOT
from tests.support.envs import ENDLESS
from tests.support.helpers import pid_alive, spec, wait_until
from tests.workflows.test_restart import _harnesses, _pairs, _worker

pytestmark = pytest.mark.timeout(300)

SAMPLES, TURNS = 3, 30
SKEWED = ROOT / "tests" / "support" / "skewed_worker.py"


async def _holder(client, gwid: str) -> str | None:
    """The identity of the worker running the group's activity, if it runs."""
    desc = await client.get_workflow_handle(gwid).describe()
    for p in desc.raw_description.pending_activities:
        if p.activity_type.name == contract.RUN_GROUP and p.last_worker_identity:
            return p.last_worker_identity
    return None


async def _all_past(client, gwid: str, turns: int, samples: int = SAMPLES) -> bool:
    """Every member has `turns` turns in the group's record (its latest heartbeat)."""
    for s in range(samples):
        try:
            data = await load_transcript(client, member_id(gwid, s))
        except EpisodesError:  # the group is not started yet
            return False
        if len(data["turns"]) < turns:
            return False
    return True


async def _run(ec: EpisodesClient, s, batch: str):
    [group] = [g async for g in ec.run_batch(s, batch_id=batch, groups=True, execution="group")]
    return group


async def test_a_lost_group_worker_restores_every_member_on_another(dev_server) -> None:
    queue = f"grestart-{uuid.uuid4().hex[:6]}"
    procs = [_worker(dev_server.address, queue) for _ in range(2)]
    client = await connect(dev_server.address)
    ec = EpisodesClient(client, task_queue=queue)
    try:
        s = spec(
            name=f"gr-{uuid.uuid4().hex[:6]}",
            env=ENDLESS,
            env_args={"delay_s": 0.15},
            max_turns=TURNS,
            samples=SAMPLES,
            on_worker_lost="restart",
            worker_lost_timeout_s=3,
        )
        clean = await asyncio.wait_for(_run(ec, s, f"{s.name}-clean"), 120)
        assert {(r.termination, r.turns, r.restarts) for r in clean.results} == {
            ("max_turns", TURNS, 0)
        }
        batch = f"{s.name}-killed"
        gwid = f"{batch}.t0.g"
        running = asyncio.create_task(_run(ec, s, batch))
        # Every member past a few turns in the heartbeat's record, then kill its worker.
        assert await wait_until(lambda: _all_past(client, gwid, 5), timeout=60)
        identity = await _holder(client, gwid)
        assert identity is not None
        [holder] = [w for w in procs if f"-{w.pid}-" in identity]
        harnesses = _harnesses(holder)
        assert harnesses
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
        killed_at = time.monotonic()
        group = await asyncio.wait_for(running, 120)
        print(f"group done {time.monotonic() - killed_at:.1f} s after the kill")
        assert group.failed is None and group.retried == 0
        for r in group.results:
            assert (r.termination, r.turns, r.restarts) == ("max_turns", TURNS, 1), r
            assert r.turns_replayed >= 5 and r.replay_divergences == 0
            # The restored env saw every turn once: replayed ones and new ones.
            assert r.score_details == {"turns": TURNS}
        for s_ in range(SAMPLES):
            killed = await load_transcript(client, member_id(gwid, s_))
            assert [t["record"]["turn"] for t in killed["turns"]] == list(range(TURNS))
            twin = await load_transcript(client, clean.results[s_].workflow_id)
            assert _pairs(killed) == _pairs(twin)
        # The lost worker's harnesses died with it; the survivor released its own.
        assert await wait_until(lambda: not any(pid_alive(p) for p in harnesses), timeout=10)
        [survivor] = [w for w in procs if w is not holder]
        assert await wait_until(lambda: not _harnesses(survivor), timeout=15)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


async def test_a_lost_group_worker_without_restarts_ends_members_worker_lost(dev_server) -> None:
    """`on_worker_lost: fail`: the members end `worker_lost` with the turns the last
    heartbeat recorded (readable by member id), and the group is yielded `failed`."""
    queue = f"glost-{uuid.uuid4().hex[:6]}"
    procs = [_worker(dev_server.address, queue) for _ in range(2)]
    client = await connect(dev_server.address)
    ec = EpisodesClient(client, task_queue=queue)
    try:
        s = spec(
            name=f"gl-{uuid.uuid4().hex[:6]}",
            env=ENDLESS,
            env_args={"delay_s": 0.15},
            max_turns=200,
            samples=2,
            worker_lost_timeout_s=3,
            group_retries=0,
        )
        gwid = f"{s.name}.t0.g"
        running = asyncio.create_task(_run(ec, s, s.name))
        assert await wait_until(lambda: _all_past(client, gwid, 3, samples=2), timeout=60)
        identity = await _holder(client, gwid)
        assert identity is not None
        [holder] = [w for w in procs if f"-{w.pid}-" in identity]
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
        group = await asyncio.wait_for(running, 120)
        assert group.failed is not None and "worker_lost" in group.failed
        for r in group.results:
            assert r.termination == "worker_lost" and r.turns >= 3
            data = await load_transcript(client, r.workflow_id)
            assert [t["record"]["turn"] for t in data["turns"]] == list(range(r.turns))
            assert data["result"]["termination"] == "worker_lost"
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _skewed_worker(address: str, queue: str, skew_s: float) -> subprocess.Popen:
    """A worker whose group activities' clock runs `skew_s` ahead (tests/support)."""
    argv = [sys.executable, str(SKEWED), str(skew_s), "worker", "--address", address]
    return subprocess.Popen(
        [*argv, "--task-queue", queue],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def test_group_timeout_s_holds_across_a_lost_worker(dev_server) -> None:
    """A group that never ends by itself, its worker killed mid-group: the retry on the
    other worker keeps the deadline of the group's first scheduling (not its own) and,
    past it, cuts every member (`cut: group_timeout`) without restoring it, each with
    the turns its last heartbeat recorded, once; the group comes out partial with no
    member that ended. Nothing is timed: the timeout (600 s) is far beyond the first
    worker's run, and the second worker's group clock runs 598 s ahead, so its first
    reading is past the first scheduling's deadline (the retry comes at least the
    3 s heartbeat timeout after it) and 2 s short of a deadline counted from the
    retry's own scheduling."""
    timeout_s, skew_s = 600.0, 598.0
    queue = f"gtimeout-{uuid.uuid4().hex[:6]}"
    first = _worker(dev_server.address, queue)
    procs = [first]
    client = await connect(dev_server.address)
    ec = EpisodesClient(client, task_queue=queue)
    try:
        s = spec(
            name=f"gt-{uuid.uuid4().hex[:6]}",
            env=ENDLESS,
            env_args={"delay_s": 0.15},
            max_turns=2000,
            samples=2,
            on_worker_lost="restart",
            worker_lost_timeout_s=3,
            group_timeout_s=timeout_s,
        )
        gwid = f"{s.name}.t0.g"
        running = asyncio.create_task(_run(ec, s, s.name))
        assert await wait_until(lambda: _all_past(client, gwid, 3, samples=2), timeout=120)
        identity = await _holder(client, gwid)
        assert identity is not None and f"-{first.pid}-" in identity, identity
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
        recorded = [
            len((await load_transcript(client, member_id(gwid, i)))["turns"]) for i in (0, 1)
        ]
        procs.append(_skewed_worker(dev_server.address, queue, skew_s))
        group = await asyncio.wait_for(running, 150)
        assert group.partial and group.results == [] and group.failed is None
        assert group.cut == [member_id(gwid, i) for i in range(2)]
        for wid, turns in zip(group.cut, recorded, strict=True):
            data = await load_transcript(client, wid)
            r = data["result"]
            assert (r["termination"], r["cut"]) == ("cancelled", "group_timeout")
            # Cut before its restore began: no fresh harness, no replay.
            assert (r["restarts"], r["turns_replayed"], r["turns"]) == (0, 0, turns), r
            assert [t["record"]["turn"] for t in data["turns"]] == list(range(r["turns"]))
        assert await wait_until(lambda: not _harnesses(procs[1]), timeout=15)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
