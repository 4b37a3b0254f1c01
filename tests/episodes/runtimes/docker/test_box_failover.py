"""A box that dies under an episode for a reason not the harness's (its container
removed from outside) fails the episode over to a fresh box by exact replay; past
`max_box_failovers` the episode ends `box_lost` (an infrastructure outcome, which
batches run again). A real engine, a real worker, a container removed with the engine's
own API mid-episode."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from episodes.client.histories.transcript import load_transcript
from episodes.types.io import EpisodeInput, EpisodeProgress
from episodes.types.results import RERUN_TERMINATIONS, EpisodeResult
from tests.support.backends import docker as backend
from tests.support.backends import require
from tests.support.envs import ENDLESS, gate
from tests.support.helpers import spec, wait_until

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]


@pytest.fixture(scope="module", autouse=True)
def _engine() -> None:
    require(backend)  # a skip, or with EPISODES_REQUIRE=docker (CI) a failure


def _spec(**over):  # type: ignore[no-untyped-def]
    name = f"fo-{uuid.uuid4().hex[:6]}"
    return spec(
        name=name,
        env=ENDLESS,
        # The env holds its step after turn 3's reply until the test opens the gate.
        env_args={"done_at": 8, "gate": name, "gate_at": 4},
        max_turns=20,
        turn_timeout_s=60.0,
        harness={
            "runtime": {"type": "docker", "image": backend.IMAGE},
            "ready_timeout_s": 60.0,
        },
        **over,
    )


async def _remove_its_container(client, wid: str, after_turns: int) -> str:
    """Once the episode holds at its gate with `after_turns` turns recorded, remove its
    box from outside (the removal returns once the container is gone), then let it go on."""
    handle = client.get_workflow_handle(wid)
    reached, opened = gate(wid)
    assert await asyncio.to_thread(reached.wait, 120)

    async def far_enough() -> bool:
        try:
            p = await handle.query("progress", result_type=EpisodeProgress)
        except Exception:
            return False
        return p.turns_done >= after_turns

    assert await wait_until(far_enough, timeout=120)
    label = f"episodes.workflow={wid}"
    [box] = backend.client().containers.list(filters={"label": label})
    await asyncio.to_thread(box.remove, force=True)
    opened.set()
    return box.name


async def _run(client, s) -> tuple[EpisodeResult, str]:
    wid = s.name
    handle = await client.start_workflow(
        "EpisodeWorkflow",
        EpisodeInput(spec=s, task=s.tasks[0], batch=s.name),
        id=wid,
        task_queue="episodes-test",
        result_type=EpisodeResult,
    )
    removed = await _remove_its_container(client, wid, 3)
    return await asyncio.wait_for(handle.result(), 240), removed


@pytest.mark.parametrize("turn_mode", ["drive", "activity"])
async def test_a_container_removed_from_outside_fails_over_and_ends_env_done(
    client, worker, turn_mode
) -> None:
    s = _spec(turn_mode=turn_mode)
    result, removed = await _run(client, s)
    assert (result.termination, result.box_failovers, result.restarts) == ("env_done", 1, 0), (
        result.error
    )
    assert result.turns == 8 and result.turns_replayed >= 3
    # Every turn delivered once: the history holds turns 0..7, each message once, in order.
    transcript = await load_transcript(client, s.name)
    turns = [t["record"] for t in transcript["turns"]]
    assert [t["turn"] for t in turns] == list(range(8))
    assert [t["message"] for t in turns] == [f"m{i}" for i in range(8)]
    assert all(t["error_type"] is None for t in turns)
    # The removed container is gone for good; the fresh one was released at the end.
    assert not backend.client().containers.list(all=True, filters={"name": removed})
    label = f"episodes.workflow={s.name}"
    assert await wait_until(
        lambda: not backend.client().containers.list(filters={"label": label}), timeout=30
    )


async def test_past_max_box_failovers_the_episode_ends_box_lost(client, worker) -> None:
    result, _ = await _run(client, _spec(max_box_failovers=0))
    assert (result.termination, result.box_failovers) == ("box_lost", 0)
    assert "from outside" in (result.error or ""), result.error
    assert result.turns >= 3  # the recorded turns stand, and are scored
    assert result.score_details.get("turns") == result.turns
    assert "box_lost" in RERUN_TERMINATIONS  # a batch runs it again as a fresh episode
