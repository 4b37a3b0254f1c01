"""Episodes are findable by every search attribute and readable in the UI's metadata.

Visibility is eventually consistent, so each query is polled until it returns exactly
the expected workflow ids (within a generous bound), never asserted once.
"""

from __future__ import annotations

import asyncio
import uuid

from temporalio.api.enums.v1 import EventType
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client, WorkflowHandle

from episodes.client import EpisodesClient
from episodes.types.io import EpisodeProgress
from tests.conftest import scripted_command
from tests.support.helpers import drive_result_turns, spec, wait_until

QUEUE = "episodes-test"
GUESSER = ["{python}", "-m", "episodes.harness.reference.guesser"]


async def _ids(client: Client, query: str) -> set[str]:
    return {wf.id async for wf in client.list_workflows(query)}


async def _assert_finds(client: Client, query: str, expected: set[str]) -> None:
    seen: set[str] = set()

    async def matches() -> bool:
        nonlocal seen
        seen = await _ids(client, query)
        return seen == expected

    assert await wait_until(matches, timeout=30, interval=0.3), (
        f"{query!r} found {sorted(seen)}, expected {sorted(expected)}"
    )


async def current_details(handle: WorkflowHandle) -> str:
    """What the UI shows as "Current Details": the built-in metadata query."""
    meta = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    return meta.current_details


async def test_episodes_are_findable_by_each_search_attribute(client, worker) -> None:
    tag = uuid.uuid4().hex[:6]
    batch = f"vis-{tag}"
    script = spec(
        name=f"vis-script-{tag}",
        tasks=[
            {
                "id": f"perfect-{tag}",
                "data": {"messages": ["a", "b", "c"], "expected": ["a", "b", "c"]},
            },
            {
                "id": f"partial-{tag}",
                "data": {"messages": ["a", "b", "c"], "expected": ["a", "x", "y"]},
            },
        ],
    )
    capped = spec(
        name=f"vis-capped-{tag}",
        max_turns=2,
        tasks=[{"id": f"capped-{tag}", "data": {"messages": ["a", "b", "c"]}}],
    )
    # The bisector's first guess over 1..100 is 50: found on turn 1, reward 1.0.
    guess = spec(
        name=f"vis-guess-{tag}",
        env="guess-number",
        command=GUESSER,
        tasks=[{"id": f"guess-{tag}", "data": {"secret": 50}}],
    )
    ec = EpisodesClient(client, task_queue=QUEUE)
    results = await asyncio.gather(
        *(ec.run_episode(s, t, batch_id=batch) for s in (script, capped, guess) for t in s.tasks)
    )
    by_task = {r.task_id.rsplit("-", 1)[0]: r for r in results}
    # The outcomes the queries below rely on, so a failed query means visibility.
    outcomes = {
        k: (r.termination, r.turns, None if r.reward is None else round(r.reward, 6))
        for k, r in by_task.items()
    }
    assert outcomes == {
        "perfect": ("env_done", 3, 1.0),
        "partial": ("env_done", 3, 0.333333),
        "capped": ("max_turns", 2, None),
        "guess": ("env_done", 1, 1.0),
    }
    wid = {k: r.workflow_id for k, r in by_task.items()}
    in_batch = f'EpisodeBatch = "{batch}"'

    await _assert_finds(client, in_batch, set(wid.values()))
    assert (await client.count_workflows(in_batch)).count == 4
    await _assert_finds(client, f'EpisodeTask = "partial-{tag}"', {wid["partial"]})
    await _assert_finds(client, f'EpisodeSpec = "vis-capped-{tag}"', {wid["capped"]})
    await _assert_finds(client, f'{in_batch} AND EpisodeEnv = "guess-number"', {wid["guess"]})
    await _assert_finds(
        client,
        f'{in_batch} AND EpisodeEnv = "script"',
        {wid["perfect"], wid["partial"], wid["capped"]},
    )
    await _assert_finds(client, f'{in_batch} AND EpisodeTermination = "max_turns"', {wid["capped"]})
    await _assert_finds(
        client,
        f'{in_batch} AND EpisodeTermination IN ("max_turns", "turn_timeout")',
        {wid["capped"]},
    )
    await _assert_finds(
        client,
        f'{in_batch} AND EpisodeTermination = "env_done"',
        {wid["perfect"], wid["partial"], wid["guess"]},
    )
    await _assert_finds(
        client, f"{in_batch} AND EpisodeReward >= 0.5", {wid["perfect"], wid["guess"]}
    )
    await _assert_finds(client, f"{in_batch} AND EpisodeReward < 0.5", {wid["partial"]})
    await _assert_finds(
        client, f"{in_batch} AND EpisodeReward BETWEEN 0.3 AND 0.4", {wid["partial"]}
    )
    await _assert_finds(client, f"{in_batch} AND EpisodeTurns = 2", {wid["capped"]})
    await _assert_finds(
        client, f"{in_batch} AND EpisodeTurns >= 3", {wid["perfect"], wid["partial"]}
    )
    await _assert_finds(client, f"{in_batch} AND EpisodeTurns < 2", {wid["guess"]})


async def test_summaries_and_current_details(client, worker) -> None:
    s = spec(
        name=f"meta-{uuid.uuid4().hex[:6]}",
        tasks=[{"id": "t0", "data": {"messages": ["hello", "world", "bye"]}}],
    )
    handle = await EpisodesClient(client, task_queue=QUEUE).start_episode(s, s.tasks[0])
    result = await handle.result()
    assert result.termination == "env_done" and result.turns == 3

    desc = await handle.describe()
    assert await desc.static_summary() == "script · task t0 · sample 0"
    assert f"**batch** `{s.name}`" in (await desc.static_details() or "")

    convert = client.data_converter.payload_converter
    summaries, updates = [], []
    async for ev in handle.fetch_history_events():
        if ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            summaries.append(convert.from_payload(ev.user_metadata.summary, str))
        elif ev.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            req = ev.workflow_execution_update_accepted_event_attributes.accepted_request
            updates.append((req.input.name, req.meta.update_id))
    # One drive runs the turns, scores and releases on the session's worker.
    assert summaries == ["provision t0", "drive from turn 0 (max 10)"]
    # Its Updates name the turns they record, in order, each turn once.
    session = (await handle.query("progress", result_type=EpisodeProgress)).session
    assert session is not None
    spans = []
    for name, update_id in updates:
        assert name == "record_turns"
        prefix, _, span = update_id.rpartition(":turns-")
        assert prefix == session.session_id, update_id
        first, last = map(int, span.split("-"))
        spans += range(first, last + 1)
    # The last turns (here, fast ones: all of them) ride on the drive's result.
    spans += [r.record.turn for r in await drive_result_turns(client, handle)]
    assert spans == [0, 1, 2], updates

    details = await current_details(handle)
    assert details.startswith("**done** · turn 3/10 · `env_done`"), details
    assert "**last turn (2)**" in details
    assert "- message: `bye`" in details and "- reply: `bye`" in details


async def test_a_running_episode_shows_its_progress(client, worker) -> None:
    """While turn 1 hangs, the UI sees "running · turn 1/10" and can list it as running."""
    batch = f"live-{uuid.uuid4().hex[:6]}"
    s = spec(
        name=batch,
        command=scripted_command("hang", "turn=1"),
        turn_timeout_s=300,
        tasks=[{"id": "t0", "data": {"messages": ["first", "second", "third"]}}],
    )
    handle = await EpisodesClient(client, task_queue=QUEUE).start_episode(s, s.tasks[0])
    try:
        seen = ""

        async def running() -> bool:
            nonlocal seen
            seen = await current_details(handle)
            return seen.startswith("**running** · turn 1/10")

        assert await wait_until(running, timeout=30, interval=0.2), seen
        assert "**last turn (0)**" in seen and "- reply: `first`" in seen
        # The drive's heartbeat names the turn in progress (the UI's pending activity).
        beat: object = None

        async def heartbeat_names_turn_1() -> bool:
            nonlocal beat
            pending = (await handle.describe()).raw_description.pending_activities
            details = [
                p.heartbeat_details.payloads for p in pending if p.activity_type.name == "drive"
            ]
            beat = [client.data_converter.payload_converter.from_payloads(list(d)) for d in details]
            return beat == [[{"turn": 1}]]

        assert await wait_until(heartbeat_names_turn_1, timeout=30, interval=0.3), beat
        await _assert_finds(
            client, f'EpisodeBatch = "{batch}" AND ExecutionStatus = "Running"', {handle.id}
        )
    finally:
        await handle.cancel()
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.termination == "cancelled"
    await _assert_finds(
        client, f'EpisodeBatch = "{batch}" AND EpisodeTermination = "cancelled"', {handle.id}
    )
    assert (await current_details(handle)).startswith("**done** · turn 1/10 · `cancelled`")
