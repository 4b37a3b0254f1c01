"""EpisodeWorkflow end to end on a real dev server, real worker, real harness processes."""

from __future__ import annotations

import uuid

from temporalio.client import Client

from episodes.client import EpisodesClient
from episodes.types.results import Task
from tests.support.helpers import spec, turn_modes_fixture

# Both `turn_mode`s: the drive (default) and one activity per turn.
turn_mode = turn_modes_fixture()

QUEUE = "episodes-test"


def _client(client: Client) -> EpisodesClient:
    return EpisodesClient(client, task_queue=QUEUE)


async def test_script_episode_runs_to_env_done(client, worker) -> None:
    s = spec(
        name=f"script-{uuid.uuid4().hex[:6]}",
        tasks=[{"id": "t0", "data": {"messages": ["a", "b", "c"], "expected": ["a", "x", "c"]}}],
    )
    result = await _client(client).run_episode(s, s.tasks[0])
    assert result.termination == "env_done"
    assert result.turns == 3
    assert result.reward is not None and abs(result.reward - 2 / 3) < 1e-9
    assert result.error is None
    assert len(worker.registry) == 0  # released


async def test_rerun_attaches_instead_of_duplicating(client, worker) -> None:
    s = spec(name=f"rerun-{uuid.uuid4().hex[:6]}")
    ec = _client(client)
    first = await ec.run_episode(s, s.tasks[0])
    second = await ec.run_episode(s, s.tasks[0])
    assert first.workflow_id == second.workflow_id
    assert first.duration_s == second.duration_s  # the same recorded result, not a new run
    n = await client.count_workflows(f"WorkflowId = '{first.workflow_id}'")
    assert n.count == 1


async def test_max_turns(client, worker) -> None:
    s = spec(name=f"max-{uuid.uuid4().hex[:6]}", max_turns=2)
    result = await _client(client).run_episode(s, Task(id="t0", data={"messages": ["a", "b", "c"]}))
    assert result.termination == "max_turns"
    assert result.turns == 2


async def test_oversized_reply_is_truncated_in_history(client, worker) -> None:
    """A 3 MB reply would exceed Temporal's 2 MB payload limit: with `record: full` but no
    external storage on this worker, it is recorded as a marker that says why."""
    from episodes.truncate import NO_STORAGE_REASON
    from episodes.types.io import EpisodeProgress

    s = spec(
        name=f"big-{uuid.uuid4().hex[:6]}",
        env="python-repl",
        command=["{python}", "-m", "episodes.harness.reference.repl"],
        tasks=[{"id": "t0", "data": {"snippets": ["print('x' * 3_000_000)", "1 + 1"]}}],
    )
    handle = await _client(client).start_episode(s, s.tasks[0])
    result = await handle.result()
    assert result.termination == "env_done" and result.turns == 2
    progress = await handle.query("progress", result_type=EpisodeProgress)
    first = progress.turns[0].reply
    assert first["__truncated__"] is True and first["bytes"] >= 3_000_000
    assert first["reason"] == NO_STORAGE_REASON
    assert progress.turns[1].reply.strip() == "2"
