"""`episodes export` over batches as they are after a real run: an episode re-run after
an infrastructure failure, a group with a member still running, a batch without a
model. Real parts: the session's dev server and worker, the LLM harness, the model
proxy and the scripted upstream (its failures and held calls are real HTTP answers)."""

from __future__ import annotations

import asyncio
import uuid

import pyarrow.parquet as pq
import pytest

from episodes.client import EpisodesClient
from episodes.model.scripted.chat_template import ChatTemplate
from episodes.model.scripted.server import ScriptedUpstream, kv_policy
from episodes.types.results import Task
from episodes.types.spec import parse_spec
from tests.episodes.cli.test_cli import episodes as cli
from tests.episodes.session.test_agent_session import UPSTREAM_KEY, agent_spec
from tests.episodes.training.test_training import _addr, _visible
from tests.support.helpers import spec, wait_until

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(autouse=True)
def _upstream_key(monkeypatch):
    monkeypatch.setenv("EPISODES_TEST_UPSTREAM_KEY", UPSTREAM_KEY)


async def test_export_takes_final_attempts_and_refuses_a_group_still_running(
    client, worker, tmp_path
):
    batch = f"export-rerun-{uuid.uuid4().hex[:6]}"
    ec = EpisodesClient(client, task_queue="episodes-test")
    held = asyncio.Event()

    async def gate(request) -> None:  # type: ignore[no-untyped-def]
        if ".one.s" in request["headers"].get("X-Session-ID", ""):
            await held.wait()  # the "one" task's episode stays running

    up = ScriptedUpstream(policy=kv_policy, key=UPSTREAM_KEY, template=ChatTemplate(), gate=gate)
    async with up:
        data = agent_spec(up.base_url, samples=2, batch_retries=1, concurrency=1, name=batch)
        data["harness"]["inherit_env"] = ["PYTHONPATH"]
        s = parse_spec(data)
        up.fail(3)  # the first episode's first call, past its 2 retries: model_error
        results = [r async for r in ec.run_batch(s)]
        assert sorted(r.workflow_id for r in results) == [f"{batch}.ab.s0.r1", f"{batch}.ab.s1"]
        assert {r.termination for r in results} == {"env_done"}
        lost = await ec.run_episode(s, s.tasks[0], 0, batch_id=batch)  # attaches: the first
        assert lost.workflow_id == f"{batch}.ab.s0" and lost.termination == "model_error"
        assert await wait_until(lambda: _visible(client, batch, 2), timeout=60, interval=0.25)

        out = tmp_path / "samples.parquet"
        code, stdout, err = await cli("export", batch, "--out", str(out), *_addr(client))
        assert code == 0, err
        assert "2 samples from 2 episodes" in stdout
        rows = pq.read_table(out).to_pylist()
        # The group is its 2 samples' final attempts: not the model_error one beside them.
        assert sorted(r["episode_id"] for r in rows) == [f"{batch}.ab.s0.r1", f"{batch}.ab.s1"]
        assert [r["advantage"] for r in rows] == [0.0, 0.0]

        running = await ec.start_episode(
            s, Task(id="one", data={"goal": {"a": "1"}}), 0, batch_id=batch
        )
        try:
            assert await wait_until(lambda: _visible(client, batch, 3), timeout=60, interval=0.25)
            out.unlink()
            code, _, err = await cli("export", batch, "--out", str(out), *_addr(client))
            assert code == 1
            assert f"{batch}/one: {running.id} (still running)" in err and "nothing written" in err
            assert not out.exists()
            code, stdout, err = await cli(
                "export", batch, "--out", str(out), "--skip-incomplete", *_addr(client)
            )
            assert code == 0, err
            assert f"skipped 1 group(s) with a member without a result: {batch}/one" in err
            assert "2 samples from 2 episodes" in stdout
            assert {r["group_id"] for r in pq.read_table(out).to_pylist()} == {f"{batch}/ab"}
        finally:
            held.set()
            await running.cancel()


async def test_export_of_a_batch_without_a_model_says_why_and_fails(client, worker, tmp_path):
    batch = f"export-nomodel-{uuid.uuid4().hex[:6]}"
    s = spec(name=batch, samples=2)
    results = [r async for r in EpisodesClient(client, task_queue="episodes-test").run_batch(s)]
    assert {r.termination for r in results} == {"env_done"}
    assert await wait_until(lambda: _visible(client, batch, 2), timeout=60, interval=0.25)
    out = tmp_path / "samples.parquet"
    code, stdout, err = await cli("export", batch, "--out", str(out), *_addr(client))
    assert code == 1, (stdout, err)
    assert "no episode made model calls" in err and "`model`" in err
    assert not out.exists() and not list(tmp_path.iterdir())
