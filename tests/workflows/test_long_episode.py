"""Long episodes continue-as-new between drives, keeping their live session.

A dev server of its own suggests continue-as-new after a few dozen history events,
so a 2,000-turn episode runs as a chain of many runs: one provision at the start,
one release at the end, one live harness throughout (the counting harness answers
1..2000 with one pid), and the whole transcript readable across the chain. Also:
`turns_per_run` bounds a run by itself, and a cancel in a continued run releases
the session that run inherited.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.worker import Replayer

from episodes.cli.show import load_transcript
from episodes.client import EpisodesClient
from episodes.client.connect import connect
from episodes.client.devserver import DevServer
from episodes.payloads.settings import configured_data_converter
from episodes.types.io import EpisodeInput, EpisodeProgress
from episodes.types.results import EpisodeResult
from tests.conftest import ROOT
from tests.support.envs import ENDLESS
from tests.support.helpers import host_pid, pid_alive, spec, wait_until
from workers.worker import EpisodeWorker, WorkerOptions
from workflows.episode import EpisodeWorkflow

COUNTING = [sys.executable, str(ROOT / "tests" / "support" / "harnesses" / "counting_harness.py")]
QUEUE = "long-episodes"
# Far below the turns of one run at the default `turns_per_run` (1,000): every
# continue-as-new past the first one is the server's suggestion.
SUGGEST_CAN_AT = 25


@pytest.fixture(scope="module")
def can_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    tmp = tmp_path_factory.mktemp("temporal-long")
    server = DevServer(
        auto_port=True,
        headless=True,
        db_file=tmp / "temporal.db",
        log_file=tmp / "server.log",
        extra_dynamic_config={
            "limit.historyCount.suggestContinueAsNew": str(SUGGEST_CAN_AT),
            # The server delays a run that continues-as-new within this long of its
            # start (1 s by default, against tight loops); these runs are that short.
            "history.workflowIdReuseMinimalInterval": '"0s"',
        },
    )
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
async def can_client(can_server: DevServer) -> Client:
    return await connect(can_server.address, timeout_s=30)


@pytest.fixture(scope="module")
async def can_worker(can_client: Client) -> AsyncIterator[EpisodeWorker]:
    # A reaper pass every second: it must see a session between two runs as in use.
    w = EpisodeWorker(can_client, WorkerOptions(task_queue=QUEUE, reap_interval_s=1))
    task = asyncio.create_task(w.run())
    yield w
    w.request_stop()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait_for(task, 30)


async def _chain(client: Client, workflow_id: str) -> tuple[list[str], list[list[str]]]:
    """The run ids of the chain, first first, and the activities each run scheduled."""
    run_id = None
    async for ev in client.get_workflow_handle(workflow_id).fetch_history_events(page_size=1):
        run_id = ev.workflow_execution_started_event_attributes.first_execution_run_id
        break
    ids, runs = [], []
    while run_id:
        ids.append(run_id)
        names, run_id = [], None
        async for ev in client.get_workflow_handle(
            workflow_id, run_id=ids[-1]
        ).fetch_history_events():
            if ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                names.append(ev.activity_task_scheduled_event_attributes.activity_type.name)
            elif ev.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
                attrs = ev.workflow_execution_continued_as_new_event_attributes
                run_id = attrs.new_execution_run_id
        runs.append(names)
    return ids, runs


async def test_a_2000_turn_episode_continues_as_new_on_one_live_session(
    can_client, can_worker
) -> None:
    s = spec(
        name=f"long-{uuid.uuid4().hex[:6]}",
        env=ENDLESS,
        command=COUNTING,
        max_turns=2000,
        tasks=[{"id": "t0"}],
        # A trusted process group: the test watches the harness's host pid end.
        harness={"runtime": {"type": "subprocess", "isolation": "none"}},
    )
    handle = await EpisodesClient(can_client, task_queue=QUEUE).start_episode(s, s.tasks[0])
    result = await asyncio.wait_for(handle.result(), 300)
    assert (result.termination, result.turns, result.error) == ("max_turns", 2000, None)
    # Scored once, on the worker, over the session's whole transcript.
    assert result.reward == 1.0 and result.score_details == {"turns": 2000}

    run_ids, runs = await _chain(can_client, handle.id)
    # turns_per_run alone makes 2 runs; the server's suggestion (history size and event
    # count) may add more, how many depends on how the drive batched its Updates, that
    # is on the machine's load: not asserted.
    assert len(runs) >= 2, [len(r) for r in runs]
    print(f"{len(runs)} runs")
    # The last run's drive releases the session once scored.
    assert runs[0][0] == "provision" and runs[-1][-1] == "drive"
    assert [n for r in runs for n in r if n != "drive"] == ["provision"]
    assert all("drive" in r for r in runs)

    shown = await load_transcript(can_client, handle.id)
    turns = [t["record"] for t in shown["turns"]]
    assert [t["turn"] for t in turns] == list(range(2000))
    assert [t["reply"]["received"] for t in turns] == list(range(1, 2001))  # each sent once
    assert [t["reply"]["message"] for t in turns] == [f"m{i}" for i in range(2000)]
    [pid] = {t["reply"]["pid"] for t in turns}  # one live harness across every run

    progress = await handle.query("progress", result_type=EpisodeProgress)
    assert progress.turns_done == 2000 and progress.runs == len(runs)
    assert progress.first_turn + len(progress.turns) == 2000
    assert progress.first_turn > 0 and progress.turns[0].turn == progress.first_turn

    # The carried start time: the result's duration spans the chain, not the last run.
    last = await handle.describe()
    assert last.close_time is not None
    first_run = can_client.get_workflow_handle(handle.id, run_id=run_ids[0])
    chain = (last.close_time - (await first_run.describe()).start_time).total_seconds()
    assert result.duration_s >= chain - 1.0, (result.duration_s, chain)

    assert can_worker.registry.entries() == [] and can_worker.reaped == 0
    # Every run (its Updates, its pause, its continue-as-new) replays deterministically.
    # debug_mode: no deadlock detector; a replay's verdict is determinism, and one run's
    # Updates took the replayer past its 2 s detector on a loaded machine (CI here).
    replayer = Replayer(
        workflows=[EpisodeWorkflow], data_converter=configured_data_converter(), debug_mode=True
    )
    for run_id in run_ids:
        history = await can_client.get_workflow_handle(handle.id, run_id=run_id).fetch_history()
        await replayer.replay_workflow(history)
    assert await wait_until(lambda: not pid_alive(pid), timeout=10)


async def test_turns_per_run_bounds_each_run(can_client, can_worker) -> None:
    s = spec(
        name=f"per-run-{uuid.uuid4().hex[:6]}",
        env=ENDLESS,
        env_args={"delay_s": 0.05},
        command=COUNTING,
        max_turns=30,
        tasks=[{"id": "t0"}],
    )
    handle = await can_client.start_workflow(
        "EpisodeWorkflow",
        EpisodeInput(spec=s, task=s.tasks[0], turns_per_run=5),
        id=f"{s.name}.t0",
        task_queue=QUEUE,
        result_type=EpisodeResult,
    )
    result = await asyncio.wait_for(handle.result(), 120)
    assert (result.termination, result.turns) == ("max_turns", 30)
    _, runs = await _chain(can_client, handle.id)
    # A run pauses once it holds 5 turns (a few more when the drive ran ahead of the
    # Update that said so): at most 6 runs, and more than one.
    assert 2 <= len(runs) <= 6, runs
    shown = await load_transcript(can_client, handle.id)
    assert [t["record"]["reply"]["received"] for t in shown["turns"]] == list(range(1, 31))


async def test_cancelling_a_continued_run_releases_the_carried_session(
    can_client, can_worker
) -> None:
    s = spec(
        name=f"cancel-long-{uuid.uuid4().hex[:6]}",
        env=ENDLESS,
        env_args={"delay_s": 0.05},
        command=COUNTING,
        max_turns=1000,
        tasks=[{"id": "t0"}],
    )
    handle = await can_client.start_workflow(
        "EpisodeWorkflow",
        EpisodeInput(spec=s, task=s.tasks[0], turns_per_run=3),
        id=f"{s.name}.t0",
        task_queue=QUEUE,
        result_type=EpisodeResult,
    )

    async def continued() -> bool:
        with contextlib.suppress(Exception):
            p = await handle.query("progress", result_type=EpisodeProgress)
            return p.runs >= 2 and p.turns_done > p.first_turn
        return False

    assert await wait_until(continued, timeout=60)
    [entry] = [e for e in can_worker.registry.entries() if e.workflow_id == handle.id]
    pid = host_pid(entry.session)
    await handle.cancel()
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.termination == "cancelled" and 3 <= result.turns < 1000
    _, runs = await _chain(can_client, handle.id)
    assert len(runs) >= 2 and runs[-1][-1] == "release"
    assert [n for r in runs for n in r if n != "drive"] == ["provision", "release"]
    assert handle.id not in {e.workflow_id for e in can_worker.registry.entries()}
    assert await wait_until(lambda: not pid_alive(pid), timeout=10)
