"""A group member lost with its worker (SIGKILL, a real worker process) runs again as a
fresh episode on another worker, and its group is yielded complete, whole."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import uuid

import pytest

from episodes.client import EpisodesClient
from episodes.types.io import EpisodeProgress
from episodes.types.results import EpisodeResult
from tests.support.chaos.helpers import WorkerProc
from tests.support.helpers import spec, wait_until

pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.timeout(300)]

REPL = ["{python}", "-m", "episodes.harness.reference.repl"]


def _gated(gate) -> dict:  # type: ignore[no-untyped-def]
    code = f"import os, time\nwhile not os.path.exists({str(gate)!r}):\n    time.sleep(0.05)\n"
    return {"id": "t0", "data": {"snippets": ["1 + 1", code + "'through'"]}}


async def _turns_done(client, wid: str) -> int:  # type: ignore[no-untyped-def]
    with contextlib.suppress(Exception):
        p = await client.get_workflow_handle(wid).query("progress", result_type=EpisodeProgress)
        return p.turns_done
    return 0


async def test_a_member_lost_with_its_worker_is_run_again(chaos_server, chaos_client, tmp_path):
    queue = f"glost-{uuid.uuid4().hex[:6]}"
    gate = tmp_path / "gate"
    s = spec(
        name=f"glost-{uuid.uuid4().hex[:6]}",
        env="python-repl",
        command=REPL,
        tasks=[_gated(gate)],
        samples=2,
        turn_timeout_s=120,
        worker_lost_timeout_s=3,
        group_retries=1,
        # The gate is a file in the test's folder: a process group sees it, a sandbox not.
        harness={"runtime": {"type": "subprocess", "isolation": "none"}},
    )
    a = WorkerProc(chaos_server.address, queue, tmp_path / "a.log").start()
    b: WorkerProc | None = None
    ec = EpisodesClient(chaos_client, task_queue=queue)
    agen = ec.run_batch(s, groups=True)
    try:
        await a.ready()
        pending = asyncio.ensure_future(agen.__anext__())
        firsts = [f"{s.name}.t0.s{i}" for i in (0, 1)]
        # Both members hold a session on A, past turn 0 and waiting at the gate.
        for wid in firsts:
            assert await wait_until(lambda w=wid: _turns_done(chaos_client, w), timeout=90)
        assert a.children(), "worker A should hold the harnesses"
        a.signal(signal.SIGKILL)
        assert a.wait(10) == -signal.SIGKILL
        b = await WorkerProc(chaos_server.address, queue, tmp_path / "b.log").start().ready()
        for wid in firsts:  # the lost attempts end as such
            h = chaos_client.get_workflow_handle(wid, result_type=EpisodeResult)
            assert (await asyncio.wait_for(h.result(), 120)).termination == "worker_lost"
        gate.touch()
        group = await asyncio.wait_for(pending, 180)
        with pytest.raises(StopAsyncIteration):
            await asyncio.wait_for(agen.__anext__(), 60)
    finally:
        await agen.aclose()
        a.kill()
        if b is not None:
            b.signal(signal.SIGTERM)
            with contextlib.suppress(Exception):
                b.wait(60)
            b.kill()
    assert group.failed is None, group.failed
    assert [r.workflow_id for r in group.results] == [f"{w}.r1" for w in firsts]
    assert [r.termination for r in group.results] == ["env_done", "env_done"]
    assert group.retried == 2 and len(group.results) == 2
