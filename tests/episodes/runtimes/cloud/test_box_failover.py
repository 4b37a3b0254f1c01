"""A cloud box that the platform ends under an episode (terminated from outside, a
preemption) fails the episode over to a fresh box by exact replay, as a removed Docker
container does (tests/episodes/runtimes/docker/test_box_failover.py). Through a real
Temporal server and the session's worker, on the Modal SDK fake: the runtime, the
harness driver, the activities and the workflow are the real ones."""

from __future__ import annotations

import asyncio
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import pytest

import episodes.session.launch
from episodes.client.histories.transcript import load_transcript
from episodes.runtimes.cloud.modal import ModalRuntime
from episodes.types.io import EpisodeInput, EpisodeProgress
from episodes.types.results import EpisodeResult
from episodes.types.runtime import ModalConfig
from tests.support.envs import ENDLESS, gate
from tests.support.fakes import modal_fake
from tests.support.helpers import spec, wait_until

pytestmark = pytest.mark.timeout(300)

ROOT = str(Path(__file__).resolve().parents[4])


@pytest.fixture
def boxes(monkeypatch: pytest.MonkeyPatch) -> tuple[list[ModalRuntime], Any]:
    """Every box the worker makes is a sandbox of one fake Modal, the worker's own
    Python and this checkout standing in for the image's."""
    sdk = modal_fake.fake_sdk()
    made: list[ModalRuntime] = []

    def make_runtime(config: Any, labels: dict[str, str] | None = None) -> ModalRuntime:
        workdir = tempfile.mkdtemp(prefix="fake-modal-work-")
        runtime = ModalRuntime(ModalConfig(workdir=workdir), labels=labels, sdk=sdk)
        runtime.box_python, runtime.box_episodes = sys.executable, ROOT
        made.append(runtime)
        return runtime

    monkeypatch.setattr(episodes.session.launch, "make_runtime", make_runtime)
    return made, sdk.cloud


def _spec(turn_mode: str) -> Any:
    name = f"cloud-fo-{uuid.uuid4().hex[:6]}"
    return spec(
        name=name,
        env=ENDLESS,
        env_args={"done_at": 8, "gate": name, "gate_at": 4},
        max_turns=20,
        turn_timeout_s=60.0,
        turn_mode=turn_mode,
        harness={
            "runtime": {"type": "modal"},
            "env": {"PYTHONPATH": ROOT},
            "ready_timeout_s": 60.0,
        },
    )


@pytest.mark.parametrize("turn_mode", ["drive", "activity"])
async def test_a_sandbox_terminated_mid_episode_fails_over_and_ends_env_done(
    client, worker, boxes, turn_mode
) -> None:
    made, cloud = boxes
    s = _spec(turn_mode)
    handle = await client.start_workflow(
        "EpisodeWorkflow",
        EpisodeInput(spec=s, task=s.tasks[0], batch=s.name),
        id=s.name,
        task_queue="episodes-test",
        result_type=EpisodeResult,
    )

    reached, opened = gate(s.name)
    # Mid-episode: the env holds its step after turn 3's reply until the box is gone,
    # and turns 0..2 are in the workflow's history (a drive records them every second).
    assert await asyncio.to_thread(reached.wait, 120)

    async def recorded() -> bool:
        try:
            p = await handle.query("progress", result_type=EpisodeProgress)
        except Exception:
            return False
        return p.turns_done >= 3

    assert await wait_until(recorded, timeout=120)
    [first] = made
    await asyncio.to_thread(first.sandbox.simulate_death)  # Modal ended it: terminated
    # Dead before the env goes on: a drive runs the remaining turns in milliseconds.
    assert await wait_until(first.sandbox.gone, timeout=60)
    opened.set()
    result = await asyncio.wait_for(handle.result(), 240)

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
    # A fresh sandbox took over, and was released at the end; the dead one stays dead.
    assert len(made) == 2 and made[1].id != first.id
    assert await wait_until(lambda: cloud.live() == [], timeout=30)
