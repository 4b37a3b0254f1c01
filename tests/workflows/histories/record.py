"""Record the workflow histories `tests/workflows/test_replay.py` replays.

    .venv/bin/python -m tests.workflows.histories.record          # every history
    .venv/bin/python -m tests.workflows.histories.record --new    # only issue 11's paths
    .venv/bin/python -m tests.workflows.histories.record --issue27=NAME  # a spec error
    .venv/bin/python -m tests.workflows.histories.record_fleet  # budgets, park, fork
    .venv/bin/python -m tests.workflows.histories.record --groups  # group execution
    .venv/bin/python -m tests.workflows.histories.record --group-cut  # members cut
    .venv/bin/python -m tests.workflows.histories.record --batch-group-timeout
    .venv/bin/python -m tests.workflows.histories.record --receipts  # a batch's receipts

Runs a few episodes, interactive sessions and a batch on a private dev server and
saves every run's history here as JSON. Re-record only when a workflow's commands
change on purpose: the point of the files is that refactors replay them unchanged,
as running episodes and saved histories must.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from episodes.client import EpisodesClient
from episodes.client.batch.server import start_batch
from episodes.client.connect import connect
from episodes.client.devserver import DevServer
from episodes.types.io import BatchInput, EpisodeInput
from episodes.types.results import EpisodeResult
from episodes.types.spec import parse_spec
from workers.worker import EpisodeWorker, WorkerOptions

HERE = Path(__file__).resolve().parent
QUEUE = "record"
HANG = "from episodes.harness import sdk; import time; sdk.serve(lambda t, m, e: time.sleep(600))"


async def _first_run(client: Client, workflow_id: str) -> str:
    return (await client.get_workflow_handle(workflow_id).describe()).run_id


def _spec(
    name: str, command: list[str] | None = None, messages: int = 3, tasks: int = 1, samples=1
):
    return parse_spec(
        {
            "name": name,
            "env": "script",
            "tasks": [
                {"id": f"t{i}", "data": {"messages": [f"m{j}" for j in range(messages)]}}
                for i in range(tasks)
            ],
            "harness": {
                "command": command or ["{python}", "-m", "episodes.harness.reference.echo"],
                "ready_timeout_s": 5.0,
                "stop_timeout_s": 1.0,
            },
            "samples": samples,
            "max_turns": 10,
            "turn_timeout_s": 30.0,
            "worker_lost_timeout_s": 3.0,
        }
    )


async def _save(client: Client, name: str, workflow_id: str, run_id: str | None) -> None:
    """Every run of the chain, from `run_id` (the first) to the last."""
    runs: list[dict] = []
    while run_id:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        runs.append(json.loads(history.to_json()))
        nxt = None
        for ev in history.events:
            if ev.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
                nxt = ev.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
        run_id = nxt
    (HERE / f"{name}.json").write_text(
        json.dumps({"workflow_id": workflow_id, "runs": runs}, indent=None) + "\n"
    )
    print(f"{name}: {len(runs)} run(s)")


async def _result(handle: WorkflowHandle) -> None:
    with contextlib.suppress(Exception):
        await handle.result()


async def record(client: Client) -> None:
    ec = EpisodesClient(client, task_queue=QUEUE)

    s = _spec("done")
    h = await ec.start_episode(s, s.tasks[0])
    await _result(h)
    await _save(client, "episode_env_done", h.id, h.first_execution_run_id)

    s = _spec("can").model_copy(
        update={
            "env": "tests.support.envs:Endless",
            "env_args": {"delay_s": 0.3},
            "max_turns": 5,
        }
    )
    h = await client.start_workflow(
        "EpisodeWorkflow",
        EpisodeInput(spec=s, task=s.tasks[0], turns_per_run=2, batch="can"),
        id="can.t0.s0",
        task_queue=QUEUE,
        result_type=EpisodeResult,
    )
    await _result(h)
    await _save(client, "episode_continue_as_new", h.id, h.first_execution_run_id)

    s = _spec("nostart", command=["{python}", "-c", "import sys; sys.exit(3)"])
    h = await ec.start_episode(s, s.tasks[0])
    await _result(h)
    await _save(client, "episode_start_failed", h.id, h.first_execution_run_id)

    s = _spec("cancel", command=["{python}", "-c", HANG])
    h = await ec.start_episode(s, s.tasks[0])
    await asyncio.sleep(3)
    await h.cancel()
    await _result(h)
    await _save(client, "episode_cancelled", h.id, h.first_execution_run_id)

    s = _spec("closed")
    session = await ec.open_session(s, s.tasks[0])
    await session.step("m0")
    await session.step("x")
    await session.close()
    await _save(
        client, "interactive_closed", session.handle.id, session.handle.first_execution_run_id
    )

    s = _spec("idone", messages=2)
    session = await ec.open_session(s, s.tasks[0])
    await session.step("m0")
    with contextlib.suppress(Exception):
        await session.handle.execute_update(
            "step", {"turn": 5, "message": "late"}, id="out-of-order"
        )
    await session.step("m1")
    await session.close()
    await _save(
        client, "interactive_env_done", session.handle.id, session.handle.first_execution_run_id
    )

    s = _spec("inostart", command=["{python}", "-c", "import sys; sys.exit(3)"])
    session = await ec.open_session(s, s.tasks[0])
    await session.close()
    await _save(
        client, "interactive_start_failed", session.handle.id, session.handle.first_execution_run_id
    )

    s = _spec("batch", messages=2, tasks=2, samples=2)
    tasks = s.load_tasks()
    inp = BatchInput(
        spec=s.model_copy(update={"tasks": tasks, "dataset": None}),
        batch="rb",
        concurrency=2,
        children_per_run=2,
    )
    h = await start_batch(client, inp, task_queue=QUEUE)
    await _result(h)
    await _save(client, "batch", h.id, h.first_execution_run_id)
    await _save(client, "batch_child", "rb.t0.s0", await _first_run(client, "rb.t0.s0"))


def _worker_process(address: str, queue: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "episodes.cli.main",
            "worker",
            "--address",
            address,
            "--task-queue",
            queue,
        ],
        cwd=HERE.parents[2],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def _kill_holder(client: Client, handle: WorkflowHandle, procs: list, turns: int) -> None:
    from episodes.types.io import EpisodeProgress

    for _ in range(600):
        with contextlib.suppress(Exception):
            p = await handle.query("progress", result_type=EpisodeProgress)
            if p.turns_done >= turns and p.session is not None:
                for proc in procs:
                    if f"-{proc.pid}-" in p.session.worker_id:
                        os.kill(proc.pid, signal.SIGKILL)
                        proc.wait()
                        return
        await asyncio.sleep(0.1)
    raise RuntimeError("the episode never got far enough")


async def record_new(client: Client, address: str) -> None:
    """The paths added by issue 11: worker lost in a continued run, restart, env_error,
    an interactive session that continues-as-new."""
    ec = EpisodesClient(client, task_queue=QUEUE)
    s = _spec("enverr").model_copy(
        update={"env": "tests.support.envs:Faulty", "env_args": {"on": "reset"}}
    )
    h = await ec.start_episode(s, s.tasks[0])
    await _result(h)
    await _save(client, "episode_env_error", h.id, h.first_execution_run_id)

    s = _spec("ican", messages=6)
    session = await ec.open_session(s, s.tasks[0], turns_per_run=2)
    for m in ["m0", "m1", "m2", "m3"]:
        await session.step(m)
    await session.close()
    await _save(
        client,
        "interactive_continue_as_new",
        session.handle.id,
        session.handle.first_execution_run_id,
    )

    endless = {"env": "tests.support.envs:Endless", "env_args": {"delay_s": 0.15}}
    for name, over, workers in [
        ("episode_worker_lost", {"max_turns": 200}, 1),
        ("episode_restart", {"max_turns": 20, "on_worker_lost": "restart"}, 2),
    ]:
        queue = f"{QUEUE}-{name}"
        procs = [_worker_process(address, queue) for _ in range(workers)]
        # Without a second session worker: a survivor that only runs workflows.
        survivor = EpisodeWorker(
            client, WorkerOptions(task_queue=queue, worker_id=f"{name}-wf", max_sessions=0)
        )
        task = asyncio.create_task(survivor.run())
        try:
            s = _spec(name.replace("_", "-")).model_copy(update={**endless, **over})
            h = await client.start_workflow(
                "EpisodeWorkflow",
                EpisodeInput(spec=s, task=s.tasks[0], turns_per_run=3, batch=s.name),
                id=f"{s.name}.t0.s0",
                task_queue=queue,
                result_type=EpisodeResult,
            )
            await _kill_holder(client, h, procs, 5)
            await _result(h)
            await _save(client, name, h.id, h.first_execution_run_id)
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            survivor.request_stop()
            await asyncio.wait_for(task, 30)


async def record_issue13(client: Client) -> None:
    """The paths added by issue 13: the drive's result carries its last turns and the
    drive releases the session (patch `drive-folds-episode-end`), also across
    continue-as-new; `turn_mode: activity`."""
    ec = EpisodesClient(client, task_queue=QUEUE)
    s = _spec("folded", messages=6)
    h = await ec.start_episode(s, s.tasks[0])
    await _result(h)
    await _save(client, "episode_folded_end", h.id, h.first_execution_run_id)

    s = _spec("foldcan").model_copy(
        update={"env": "tests.support.envs:Endless", "env_args": {"delay_s": 0.1}}
    )
    s = s.model_copy(update={"max_turns": 7})
    h = await client.start_workflow(
        "EpisodeWorkflow",
        EpisodeInput(spec=s, task=s.tasks[0], turns_per_run=3, batch="foldcan"),
        id="foldcan.t0.s0",
        task_queue=QUEUE,
        result_type=EpisodeResult,
    )
    await _result(h)
    await _save(client, "episode_folded_continue_as_new", h.id, h.first_execution_run_id)

    s = _spec("turnact").model_copy(update={"turn_mode": "activity"})
    h = await client.start_workflow(
        "EpisodeWorkflow",
        EpisodeInput(spec=s, task=s.tasks[0], turns_per_run=2, batch="turnact"),
        id="turnact.t0.s0",
        task_queue=QUEUE,
        result_type=EpisodeResult,
    )
    await _result(h)
    await _save(client, "episode_turn_activities", h.id, h.first_execution_run_id)


async def record_issue27(client: Client, name: str) -> None:
    """Issue 27: an env the worker cannot import (a spec error while provisioning).
    Recorded before patch `spec-error-start-failed` (`episode_spec_error`: the workflow
    failed) and after it (`episode_spec_error_outcome`: the episode ends
    harness_start_failed)."""
    ec = EpisodesClient(client, task_queue=QUEUE)
    s = _spec(name.replace("_", "-")).model_copy(update={"env": "no_such_module:Env"})
    h = await ec.start_episode(s, s.tasks[0])
    await _result(h)
    await _save(client, name, h.id, h.first_execution_run_id)


async def record_groups(client: Client) -> None:
    """Issue 32: one EpisodeGroupWorkflow for a group of 3 (`execution="group"`)."""
    ec = EpisodesClient(client, task_queue=QUEUE)
    s = _spec("group", samples=3)
    [g] = [g async for g in ec.run_batch(s, groups=True, execution="group")]
    gwid = g.results[0].workflow_id.rsplit(".s", 1)[0]
    await _save(client, "group_done", gwid, await _first_run(client, gwid))
    # A batch workflow with `execution: group`: one child group workflow a task.
    s = _spec("batch-groups", tasks=2, samples=2).model_copy(update={"execution": "group"})
    # One group at a time and a run a group: the second group runs after continue-as-new.
    inp = BatchInput(spec=s, batch=s.name, concurrency=2, children_per_run=1)
    h = await start_batch(client, inp, task_queue=QUEUE)
    await _result(h)
    await _save(client, "batch_groups", h.id, h.first_execution_run_id)


async def record_group_cut(client: Client) -> None:
    """A group workflow whose members are cut: samples 2 + oversample 1, every member
    hanging, `group_timeout_s` 3 (each ends `cancelled`, `cut: group_timeout`)."""
    ec = EpisodesClient(client, task_queue=QUEUE)
    s = _spec("group-cut", command=["{python}", "-c", HANG], samples=2).model_copy(
        update={"oversample": 1, "group_timeout_s": 3.0}
    )
    [g] = [g async for g in ec.run_batch(s, groups=True, execution="group")]
    assert g.partial and len(g.cut) == 3, g
    gwid = g.cut[0].rsplit(".s", 1)[0]
    await _save(client, "group_cut", gwid, await _first_run(client, gwid))


async def record_batch_group_timeout(client: Client) -> None:
    """A batch workflow's group past `group_timeout_s` (patch `batch-group-timeout`),
    its group workflow's deadline per member (`group-backstop-per-member`): 2 samples
    hanging, cut at 3 s."""
    s = _spec("batch-group-timeout", command=["{python}", "-c", HANG], samples=2)
    s = s.model_copy(update={"execution": "group", "group_timeout_s": 3.0})
    h = await start_batch(client, BatchInput(spec=s, batch=s.name), task_queue=QUEUE)
    result = await h.result()
    assert result.metrics.terminations == {"cancelled": 2}, result.metrics
    await _save(client, "batch_group_timeout", h.id, h.first_execution_run_id)
    gwid = f"{s.name}.t0.g"
    await _save(client, "group_batch_timeout", gwid, await _first_run(client, gwid))


async def record_receipts(client: Client) -> None:
    """A batch's receipts (`BatchReceiptsWorkflow`): two groups dispatched, one
    acknowledged twice, then the other: every group acknowledged, it ends."""
    from episodes.client.group.receipts import Receipts
    from episodes.contract import receipts_workflow_id

    r = Receipts(client, QUEUE, "rr", groups=2)
    await r.dispatched("rr/t0", 0)
    await r.dispatched("rr/t1", 1)
    await r.ack("rr/t0")
    await r.ack("rr/t0")
    h = client.get_workflow_handle(receipts_workflow_id("rr"))
    for _ in range(100):  # a worker ran the signals so far: the next lands in a new task
        if (await h.query("progress"))["acked"] == 1:
            break
        await asyncio.sleep(0.1)
    await r.ack("rr/t1")
    await h.result()
    await _save(client, "receipts", h.id, await _first_run(client, h.id))


async def main() -> None:
    only_new = "--new" in sys.argv[1:]
    only_groups = "--groups" in sys.argv[1:]
    only_cut = "--group-cut" in sys.argv[1:]
    only_batch_cut = "--batch-group-timeout" in sys.argv[1:]
    only_13 = "--issue13" in sys.argv[1:]
    only_receipts = "--receipts" in sys.argv[1:]
    issue27 = [a.removeprefix("--issue27=") for a in sys.argv[1:] if a.startswith("--issue27=")]
    with tempfile.TemporaryDirectory() as tmp:
        server = DevServer(
            auto_port=True, headless=True, db_file=Path(tmp) / "t.db", log_file=Path(tmp) / "log"
        )
        server.start()
        try:
            client = await connect(server.address, timeout_s=30)
            worker = EpisodeWorker(client, WorkerOptions(task_queue=QUEUE, worker_id="recorder"))
            task = asyncio.create_task(worker.run())
            try:
                if issue27:
                    await record_issue27(client, issue27[0])
                    return
                if only_groups:
                    await record_groups(client)
                    return
                if only_cut:
                    await record_group_cut(client)
                    return
                if only_batch_cut:
                    await record_batch_group_timeout(client)
                    return
                if only_13:
                    await record_issue13(client)
                    return
                if only_receipts:
                    await record_receipts(client)
                    return
                if not only_new:
                    await record(client)
                await record_new(client, server.address)
                await record_issue13(client)
                await record_groups(client)
                await record_group_cut(client)
                await record_batch_group_timeout(client)
                await record_receipts(client)
            finally:
                worker.request_stop()
                await asyncio.wait_for(task, 30)
        finally:
            server.stop()


if __name__ == "__main__":
    from episodes.client.exit import run_main

    run_main(lambda: asyncio.run(main()))
