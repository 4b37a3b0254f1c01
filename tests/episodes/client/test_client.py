"""The trainer client: streaming batches, re-attaching after a restart, cancelling on
close, the blocking facade, and the example scripts run as a trainer would run them.

Slow episodes are python-repl snippets that wait for a gate file the test creates,
so "fast before slow" is decided by the test, not by timing.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from episodes.client import EpisodesClient
from episodes.client.blocking.client import SyncEpisodesClient
from episodes.client.connect import connect
from episodes.types.io import EpisodeProgress
from episodes.types.results import EpisodeResult
from tests.conftest import ROOT
from tests.support.helpers import pid_alive, spec, wait_until

QUEUE = "episodes-test"
REPL = ["{python}", "-m", "episodes.harness.reference.repl"]
STEP = 60  # generous bound for one result to arrive


def _repl_spec(prefix: str, tasks: list[dict], **over):
    over.setdefault("turn_timeout_s", 90.0)
    # The gates are files in the test's folder and the pids host pids: a process group
    # sees both, a sandbox (the default box) neither.
    over.setdefault("harness", {"runtime": {"type": "subprocess", "isolation": "none"}})
    return spec(
        name=f"{prefix}-{uuid.uuid4().hex[:6]}",
        env="python-repl",
        command=REPL,
        tasks=tasks,
        **over,
    )


def _gated(task_id: str, gate: Path) -> dict:
    code = f"import os, time\nwhile not os.path.exists({str(gate)!r}):\n    time.sleep(0.05)\n"
    return {"id": task_id, "data": {"snippets": [code + "'through'"]}}


def _quick(task_id: str) -> dict:
    return {"id": task_id, "data": {"snippets": ["6 * 7"], "expected": ["42"]}}


def _hanging(task_id: str) -> dict:
    # Turn 0 reports the harness pid, turn 1 blocks far longer than the test.
    return {
        "id": task_id,
        "data": {"snippets": ["import os; os.getpid()", "import time; time.sleep(300)"]},
    }


async def _next(agen) -> EpisodeResult:
    return await asyncio.wait_for(agen.__anext__(), STEP)


async def _pid_of(client: Client, workflow_id: str) -> int | None:
    """The harness pid from turn 0 of a running episode, once that turn is recorded."""
    try:
        p = await client.get_workflow_handle(workflow_id).query(
            "progress", result_type=EpisodeProgress
        )
    except Exception:
        return None
    return int(p.turns[0].reply) if p.turns else None


async def test_run_batch_streams_results_as_they_finish(client, worker, tmp_path) -> None:
    gate = tmp_path / "gate"
    # The slow task is submitted first; results must not wait for it.
    s = _repl_spec("stream", [_gated("slow", gate), _quick("q0"), _quick("q1"), _quick("q2")])
    agen = EpisodesClient(client, task_queue=QUEUE).run_batch(s, concurrency=4)
    try:
        first = [await _next(agen) for _ in range(3)]
        assert sorted(r.task_id for r in first) == ["q0", "q1", "q2"]
        assert all(r.termination == "env_done" and r.reward == 1.0 for r in first)
        gate.touch()
        last = await _next(agen)
        assert (last.task_id, last.termination) == ("slow", "env_done")
        with pytest.raises(StopAsyncIteration):
            await agen.__anext__()
    finally:
        gate.touch()
        await agen.aclose()


async def test_restarted_trainer_reattaches_without_duplicates(
    client, worker, dev_server, tmp_path
) -> None:
    gate = tmp_path / "gate"
    s = _repl_spec(
        "reattach", [_quick("early"), _gated("running", gate), _quick("late")], samples=2
    )
    batch = s.name
    early, running, _late = s.tasks
    first = EpisodesClient(client, task_queue=QUEUE)
    finished = {k: await first.run_episode(s, early, k) for k in range(2)}
    for k in range(2):
        await first.start_episode(s, running, k)

    # The first trainer is gone; a new one, on its own connection, runs the whole batch.
    fresh = EpisodesClient(await connect(dev_server.address), task_queue=QUEUE)
    agen = fresh.run_batch(s, concurrency=6)
    try:
        got = [await _next(agen) for _ in range(4)]
        assert sorted((r.task_id, r.sample) for r in got) == [
            ("early", 0),
            ("early", 1),
            ("late", 0),
            ("late", 1),
        ]
        for r in got:
            if r.task_id == "early":
                assert r == finished[r.sample]  # the recorded result, not a second run
        gate.touch()
        rest = [await _next(agen) for _ in range(2)]
        assert sorted((r.task_id, r.sample, r.termination) for r in rest) == [
            ("running", 0, "env_done"),
            ("running", 1, "env_done"),
        ]
        with pytest.raises(StopAsyncIteration):
            await agen.__anext__()
    finally:
        gate.touch()
        await agen.aclose()

    query = f"EpisodeBatch = '{batch}'"
    assert await wait_until(lambda: _count(client, query, 6), timeout=20)
    assert (await client.count_workflows(query)).count == 6  # tasks x samples, no duplicates


async def _count(client: Client, query: str, n: int) -> bool:
    return (await client.count_workflows(query)).count >= n


async def test_closing_the_iterator_cancels_what_it_started(client, worker) -> None:
    s = _repl_spec("close", [_quick("q"), _hanging("h0"), _hanging("h1")])
    agen = EpisodesClient(client, task_queue=QUEUE).run_batch(s, concurrency=3)
    first = await _next(agen)
    assert first.task_id == "q"
    hanging = [f"{s.name}.h{i}.s0" for i in range(2)]
    pids: dict[str, int] = {}

    async def both_running() -> bool:
        for wid in hanging:
            pid = await _pid_of(client, wid)
            if pid is not None:
                pids[wid] = pid
        return len(pids) == 2

    assert await wait_until(both_running, timeout=STEP)
    assert all(pid_alive(p) for p in pids.values())
    await agen.aclose()

    for wid in hanging:
        result = await client.get_workflow_handle(wid, result_type=EpisodeResult).result()
        assert result.termination == "cancelled"
        assert result.turns == 1
    assert await wait_until(lambda: not any(pid_alive(p) for p in pids.values()), timeout=20)
    assert await wait_until(
        lambda: not any(e.workflow_id in hanging for e in worker.registry.entries()), timeout=20
    )


async def test_sync_facade(dev_server, worker, client) -> None:
    batch = spec(name=f"sync-{uuid.uuid4().hex[:6]}", samples=2)
    one = spec(name=f"sync1-{uuid.uuid4().hex[:6]}")
    inter = spec(
        name=f"sync2-{uuid.uuid4().hex[:6]}",
        tasks=[{"id": "t0", "data": {"messages": ["a", "b"], "expected": ["a", "b"]}}],
    )
    stop = _repl_spec("syncstop", [_quick("q"), _hanging("h")])

    def trainer() -> tuple:
        # Runs in a thread: the blocking client must not block the test's event loop,
        # which also runs the worker.
        with SyncEpisodesClient.connect(dev_server.address, task_queue=QUEUE) as sc:
            single = sc.run_episode(one, one.tasks[0])
            results = list(sc.run_batch(batch))
            with sc.open_session(inter, inter.tasks[0]) as session:
                assert session.first_observation == "a"
                replies = [session.step(m) for m in ("a", "b")]
            for r in sc.run_batch(stop, concurrency=2):
                assert r.task_id == "q"
                break  # leaving the loop closes the iterator: "h" is cancelled
        return single, results, replies, session.result

    single, results, replies, closed = await asyncio.to_thread(trainer)
    assert single.termination == "env_done" and single.turns == 3
    assert sorted((r.task_id, r.sample) for r in results) == [("t0", 0), ("t0", 1)]
    assert [r.reply for r in replies] == ["a", "b"] and replies[-1].done
    assert closed is not None and closed.termination == "env_done" and closed.reward == 1.0
    hung = client.get_workflow_handle(f"{stop.name}.h.s0", result_type=EpisodeResult)
    assert (await asyncio.wait_for(hung.result(), STEP)).termination == "cancelled"


async def _run_example(dev_server, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *args,
        "--address",
        dev_server.address,
        "--task-queue",
        QUEUE,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 180)
    except BaseException:
        proc.kill()
        await proc.wait()
        raise
    return proc.returncode or 0, out.decode(), err.decode()


async def test_trainer_example_streams_a_batch(dev_server, worker, client) -> None:
    batch = f"trainer-it-{uuid.uuid4().hex[:6]}"
    code, out, err = await _run_example(dev_server, "examples/trainer.py", "--batch", batch)
    assert code == 0, err
    lines = [ln for ln in out.splitlines() if ln.startswith("[")]
    assert len(lines) == 8  # examples/guess-number.yaml: 4 tasks x 2 samples
    assert {ln.split("]")[0] for ln in lines} == {f"[{i}/8" for i in range(1, 9)}
    assert all(" env_done " in ln for ln in lines), out
    assert out.splitlines()[-1].startswith("done: 8 episodes, mean reward ")
    query = f"EpisodeBatch = '{batch}'"
    assert await wait_until(lambda: _count(client, query, 8), timeout=20)

    # Restarted with the same batch id: the same results, nothing run again.
    code, again, err = await _run_example(dev_server, "examples/trainer.py", "--batch", batch)
    assert code == 0, err
    assert again.splitlines()[-1] == out.splitlines()[-1]
    assert (await client.count_workflows(query)).count == 8


async def test_interactive_example_runs(dev_server, worker) -> None:
    code, out, err = await _run_example(
        dev_server, "examples/interactive.py", "--sample", str(uuid.uuid4().int % 10**6)
    )
    assert code == 0, err
    assert "-> env_done after" in out  # the bisection found the secret
    assert "'w * h' -> '420" in out  # x defined in step 0 was still there in step 2
    assert "-> env_done, reward 1.0" in out


async def test_trainer_example_reports_an_unreachable_server() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "examples/trainer.py",
        "--address",
        "127.0.0.1:1",
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 2
    assert err.decode().startswith("trainer: cannot reach Temporal at 127.0.0.1:1")
    assert "Traceback" not in err.decode()


async def test_agent_trainer_example_collects_model_calls(dev_server, worker) -> None:
    batch = f"agent-trainer-it-{uuid.uuid4().hex[:6]}"
    code, out, err = await _run_example(
        dev_server, "examples/agent_trainer.py", "--scripted", "--batch", batch
    )
    assert code == 0, err
    lines = [ln for ln in out.splitlines() if " model calls=" in ln]
    assert len(lines) == 6  # examples/kv-agent.yaml: 3 tasks x 2 samples
    assert all(" env_done reward=1.0 " in ln for ln in lines), out
    # Every rollout carries its sampled tokens (the scripted model sends vLLM's fields).
    assert all(int(ln.rsplit("sampled tokens=", 1)[1]) > 0 for ln in lines), out
    assert out.splitlines()[-1] == f"done: 6 rollouts, batch {batch}"


@pytest.mark.parametrize("template", ["chatml", "chatml-drop-reasoning"])
async def test_grpo_loop_example_trains_on_groups_and_redispatches_stale_ones(
    dev_server, worker, template
) -> None:
    batch = f"grpo-it-{uuid.uuid4().hex[:6]}"
    code, out, err = await _run_example(
        dev_server, "examples/grpo_loop.py", "--template", template, "--batch", batch
    )
    assert code == 0, err
    print(out)
    groups = [ln for ln in out.splitlines() if ln.startswith("group ")]
    steps = [ln for ln in out.splitlines() if "training step" in ln]
    # examples/kv-agent.yaml: 3 tasks x 2 samples; one step per group, versions 0, 1, 2.
    assert len(groups) == len(steps) == 3, out
    assert [ln.split(" (")[0].strip() for ln in steps] == [
        f"training step v{v} -> v{v + 1}" for v in range(3)
    ]
    for ln in groups:  # normalized advantages: the two samples' are opposite, or both 0
        a, b = json.loads(ln.split("advantages ")[1].replace("None", "null"))
        assert a is not None and a == pytest.approx(-b, abs=1e-3), out
    # The stand-in fumbles a value now and then: not every reward is 1.
    rewards = [x for ln in groups for x in json.loads(ln.split("rewards ")[1].split(" adv")[0])]
    assert all(0.0 <= r <= 1.0 for r in rewards) and min(rewards) < 1.0, out
    # The straggler (the last task, its version-0 calls never answered) went stale when
    # the trainer reached v2 (max staleness 1) and ran again there.
    assert groups[-1].startswith(f"group {batch}/three-keys at v2, re-dispatched 1x as stale:"), out
    assert all("stale" not in ln for ln in groups[:-1]), out
    assert all(int(ln.split("would train on ")[1].split()[0]) > 0 for ln in steps), out
    splits = [int(ln.rsplit("(", 1)[1].split()[0]) for ln in steps]
    # ChatML renders earlier turns as sampled: one sequence per episode. Dropping the
    # reasoning breaks that: a sequence per model call.
    assert (max(splits) == 0) == (template == "chatml"), out
    assert out.splitlines()[-1] == f"done: batch {batch}, policy version 3"


async def test_a_rerun_after_leaving_the_stream_runs_what_it_cancelled(client, worker, tmp_path):
    """A trainer that left `run_batch` (Ctrl-C, an exception in its loop) cancelled the
    episodes in flight; running the batch again must run those, not yield `cancelled`
    for them forever, and re-attach to the one that finished."""
    gate = tmp_path / "gate"
    s = _repl_spec("rerun", [_quick("q"), _gated("g0", gate), _gated("g1", gate)])
    ec = EpisodesClient(client, task_queue=QUEUE)
    agen = ec.run_batch(s, concurrency=3)
    first = await _next(agen)
    assert first.task_id == "q"
    await agen.aclose()  # the trainer leaves: g0 and g1 are cancelled
    for t in ("g0", "g1"):
        handle = client.get_workflow_handle(f"{s.name}.{t}.s0", result_type=EpisodeResult)
        assert (await asyncio.wait_for(handle.result(), STEP)).termination == "cancelled"

    gate.touch()
    agen = ec.run_batch(s, concurrency=3)
    try:
        again = [await _next(agen) for _ in range(3)]
        with pytest.raises(StopAsyncIteration):
            await agen.__anext__()
    finally:
        await agen.aclose()
    by_task = {r.task_id: r for r in again}
    assert by_task["q"] == first  # re-attached: the recorded result, not a second run
    assert [by_task[t].termination for t in ("g0", "g1")] == ["env_done", "env_done"]


async def test_a_failed_episode_is_a_result_and_the_stream_goes_on(client, worker) -> None:
    """One episode that cannot be provisioned (its box's reuse key cannot render: a spec
    error) is yielded as a configuration error, `harness_start_failed` (before issue
    27 its workflow failed); the others are neither cancelled nor lost."""
    q0, q1 = _quick("q0"), _quick("q1")
    q0["data"]["box"], q1["data"]["box"] = "a", "b"
    bad = {"id": "bad", "data": {"snippets": ["1"]}}  # no `box`: its key cannot render
    s = _repl_spec("wffail", [q0, bad, q1], reuse_key="{task.data[box]}")
    results = []
    async for r in EpisodesClient(client, task_queue=QUEUE).run_batch(s, concurrency=3):
        results.append(r)
    by_task = {r.task_id: r for r in results}
    assert sorted(by_task) == ["bad", "q0", "q1"]
    assert by_task["bad"].termination == "harness_start_failed"
    assert by_task["bad"].config_error and by_task["bad"].workflow_id.endswith("bad.s0")
    assert "box" in (by_task["bad"].error or "")
    assert by_task["q0"].termination == by_task["q1"].termination == "env_done"
