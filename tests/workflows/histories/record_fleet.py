"""Record the histories of issues 30 and 31's paths (as `record.py` does the others).

    .venv/bin/python -m tests.workflows.histories.record_fleet [NAME ...]

(NAMEs: only those histories; `interactive_park` and `park_cancel` are recorded by
themselves.)

- `batch_budget`: a batch workflow with a model-call budget, continuing as new after
  every 2 episodes, that reaches its budget in its second run and ends
  `budget_exhausted` (5 tasks, 3 ran).
- `episode_park`: an episode that gets a `resume` while running (spent: patch
  `resume-when-not-parked`), is parked, resumed (patch `park-and-resume`) and ends.
- `episode_fork`: a fork's branch at turn 1 of a finished episode (patch
  `fork-replays-parent`), in its own batch `<parent>.f1`.
- `interactive_park`: an interactive session parked three times (patch
  `interactive-park-and-resume`): brought back by `resume`, then by its next step,
  then closed while parked (the record scored, no session brought back).
- `episode_park_cancel`, `interactive_park_cancel` (`park_cancel`): an episode and an
  interactive session cancelled while their park releases the session (a harness that
  takes two `stop_timeout_s` to stop): patch `cancel-while-parking`, they end
  `cancelled` and release again; `episode_resume_cancel`, `interactive_resume_cancel`:
  cancelled while a resume's restore runs (a harness that takes 3 s to start): patch
  `cancel-while-restoring`, they end `cancelled`, not `worker_lost`.

Re-record only when a workflow's commands change on purpose.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from episodes import contract
from episodes.client import EpisodesClient
from episodes.client.batch.server import start_batch
from episodes.client.connect import connect
from episodes.client.devserver import DevServer
from episodes.model.scripted.server import ScriptedUpstream, echo_policy
from episodes.types.io import BatchInput, EpisodeProgress
from episodes.types.model import ModelSpec
from episodes.types.priority import BatchBudget
from episodes.types.results import EpisodeResult
from tests.workflows.histories.record import QUEUE, _result, _save, _spec
from workers.worker import EpisodeWorker, WorkerOptions
from workflows.base import PARK_CANCEL_PATCH, RESTORE_CANCEL_PATCH

CHATTY = Path(__file__).resolve().parents[2] / "support" / "harnesses" / "chatty_harness.py"


async def _status(client: Client, wid: str) -> str | None:
    try:
        p = await client.get_workflow_handle(wid).query(
            contract.PROGRESS, result_type=EpisodeProgress
        )
    except Exception:
        return None
    return p.status if p.turns_done >= 1 else None


async def _until(client: Client, wid: str, status: str) -> None:
    for _ in range(600):
        if await _status(client, wid) == status:
            return
        await asyncio.sleep(0.1)
    raise RuntimeError(f"{wid} never got to {status}")


async def record_interactive_park(client: Client) -> None:
    ec = EpisodesClient(client, task_queue=QUEUE)
    s = _spec("ipark", messages=6)
    session = await ec.open_session(s, s.tasks[0])
    wid = session.workflow_id
    await session.step("m0")
    await session.park()
    await _until(client, wid, "parked")
    await session.resume()
    await _until(client, wid, "running")
    await session.step("m1")
    await session.park()
    await _until(client, wid, "parked")
    await session.step("m2")  # a step brings it back, then runs
    await session.park()
    await _until(client, wid, "parked")
    result = await session.close()  # closed while parked
    assert (result.termination, result.turns, result.restarts) == ("closed", 3, 0), result
    assert result.turns_replayed == 1 + 2, result
    await _save(client, "interactive_park", wid, session.handle.first_execution_run_id)


# Echoes, then outlives the end of stdin and ignores SIGTERM: its release takes two
# `stop_timeout_s` (then SIGKILL), the window the cancel is sent in.
STUBBORN = (
    "import signal, time; from episodes.harness import sdk; "
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "try:\n    sdk.serve(lambda t, m, e: m)\nfinally:\n    time.sleep(600)"
)


# Echoes, after a start of 3 s: a resume's restore takes that long.
SLOW_START = (
    "import time; from episodes.harness import sdk; "
    "sdk.serve(lambda t, m, e: m, setup=lambda: time.sleep(3))"
)


async def _cancel_while(
    client: Client, wid: str, status: str, patch: str = PARK_CANCEL_PATCH
) -> EpisodeResult:
    await _until(client, wid, status)  # the park's release (the resume's restore) runs
    handle = client.get_workflow_handle(wid, result_type=EpisodeResult)
    await handle.cancel()
    result = await handle.result()
    assert result.termination == "cancelled", result
    history = await handle.fetch_history()
    patches = [
        p.data
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
        for d in e.marker_recorded_event_attributes.details.values()
        for p in d.payloads
    ]
    assert any(patch.encode() in p for p in patches), f"cancelled after {status}"
    return result


async def record_park_cancel(client: Client) -> None:
    ec = EpisodesClient(client, task_queue=QUEUE)
    s = _spec("park-cancel", command=["{python}", "-c", STUBBORN]).model_copy(
        update={
            "env": "tests.support.envs:Endless",
            "env_args": {"delay_s": 0.3},
            "max_turns": 50,
        }
    )
    s = s.model_copy(update={"harness": s.harness.model_copy(update={"stop_timeout_s": 3.0})})
    h = await ec.start_episode(s, s.tasks[0])
    await _until(client, h.id, "running")
    await ec.park(h.id)
    await _cancel_while(client, h.id, "releasing")
    await _save(client, "episode_park_cancel", h.id, h.first_execution_run_id)

    s = s.model_copy(update={"name": "ipark-cancel", "env": "script", "env_args": {}})
    session = await ec.open_session(s, s.tasks[0])
    await session.step("m0")
    await session.park()
    await _cancel_while(client, session.workflow_id, "releasing")
    await _save(
        client,
        "interactive_park_cancel",
        session.workflow_id,
        session.handle.first_execution_run_id,
    )

    # Cancelled while the resume's restore runs (patch `cancel-while-restoring`).
    harness = s.harness.model_copy(
        update={"command": ["{python}", "-c", SLOW_START], "ready_timeout_s": 30.0}
    )
    s = s.model_copy(update={"name": "iresume-cancel", "harness": harness})
    session = await ec.open_session(s, s.tasks[0])
    await session.step("m0")
    await session.park()
    await _until(client, session.workflow_id, "parked")
    await session.resume()
    await _cancel_while(client, session.workflow_id, "restoring", RESTORE_CANCEL_PATCH)
    await _save(
        client,
        "interactive_resume_cancel",
        session.workflow_id,
        session.handle.first_execution_run_id,
    )
    s = s.model_copy(
        update={
            "name": "resume-cancel",
            "env": "tests.support.envs:Endless",
            "env_args": {"delay_s": 0.3},
        }
    )
    h = await ec.start_episode(s, s.tasks[0])
    await _until(client, h.id, "running")
    await ec.park(h.id)
    await _until(client, h.id, "parked")
    await ec.resume(h.id)
    await _cancel_while(client, h.id, "restoring", RESTORE_CANCEL_PATCH)
    await _save(client, "episode_resume_cancel", h.id, h.first_execution_run_id)


async def record_fleet(client: Client) -> None:
    ec = EpisodesClient(client, task_queue=QUEUE)

    async with ScriptedUpstream(policy=echo_policy) as upstream:
        s = _spec("budget", messages=1, tasks=5)
        harness = s.harness.model_copy(
            update={
                "command": [sys.executable, str(CHATTY)],
                "env": {"CHATTY_CALLS": "1"},
                "ready_timeout_s": 30.0,
            }
        )
        s = s.model_copy(
            update={
                "harness": harness,
                "model": ModelSpec(base_url=upstream.base_url, model="scripted"),
                "budget": BatchBudget(max_model_calls=3),
            }
        )
        inp = BatchInput(
            spec=s.model_copy(update={"tasks": s.load_tasks(), "dataset": None}),
            batch="rbudget",
            concurrency=1,
            children_per_run=2,
        )
        h = await start_batch(client, inp, task_queue=QUEUE)
        result = await h.result()
        assert (result.status, result.budget, result.runs) == (
            "budget_exhausted",
            "max_model_calls",
            2,
        ), result
        await _save(client, "batch_budget", h.id, h.first_execution_run_id)

    s = _spec("park").model_copy(
        update={
            "env": "tests.support.envs:Endless",
            "env_args": {"delay_s": 0.3},
            "max_turns": 12,
        }
    )
    h = await ec.start_episode(s, s.tasks[0])
    await _until(client, h.id, "running")
    await ec.resume(h.id)  # not parked: spent
    await ec.park(h.id)
    await _until(client, h.id, "parked")
    await ec.resume(h.id)
    await _result(h)
    await _save(client, "episode_park", h.id, h.first_execution_run_id)

    s = _spec("forked", messages=3)
    parent = await ec.run_episode(s, s.tasks[0])
    [branch] = await ec.fork(parent.workflow_id, at_turn=1, samples=1)
    await _result(branch)
    await _save(client, "episode_fork", branch.id, branch.first_execution_run_id)


async def main(only: list[str]) -> None:
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
                if only == ["interactive_park"]:
                    await record_interactive_park(client)
                elif only == ["park_cancel"]:
                    await record_park_cancel(client)
                elif only:
                    raise SystemExit(f"record only what? {only} (interactive_park, park_cancel)")
                else:
                    await record_fleet(client)
            finally:
                worker.request_stop()
                await asyncio.wait_for(task, 30)
        finally:
            server.stop()


if __name__ == "__main__":
    from episodes.client.exit import run_main

    run_main(lambda: asyncio.run(main(sys.argv[1:])))
