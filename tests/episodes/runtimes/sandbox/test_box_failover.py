"""A sandbox whose bwrap is killed from outside under an episode (an operator, a
supervisor) fails the episode over to a fresh box by exact replay, as a removed Docker
container does (tests/episodes/runtimes/docker/test_box_failover.py); a harness that
ends its own box (it kills the box's agent) stays `harness_crashed`. A real Temporal
server, the session's worker, real bwrap."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from typing import Any

import psutil
import pytest

import episodes.session.launch
from episodes.client.histories.transcript import load_transcript
from episodes.runtimes.base import Runtime
from episodes.runtimes.sandbox.runtime import SandboxRuntime, bwrap_path
from episodes.types.io import EpisodeInput, EpisodeProgress
from episodes.types.results import EpisodeResult
from tests.support.envs import ENDLESS, gate
from tests.support.helpers import spec, wait_until

pytestmark = [
    pytest.mark.skipif(bwrap_path() is None, reason="bwrap is not installed"),
    pytest.mark.timeout(300),
]

# The echo harness, which at turn 3 kills its own box's agent (the box's pid 2), and
# dies with its box before it could reply.
KILLS_ITS_BOX = (
    "import os, signal, time\n"
    "from episodes.harness import sdk\n"
    "def handle(turn, message, emit):\n"
    "    if turn == 3:\n"
    "        os.kill(2, signal.SIGKILL)\n"
    "        time.sleep(600)\n"
    "    return message\n"
    "sdk.serve(handle)\n"
)


@pytest.fixture
def boxes(monkeypatch: pytest.MonkeyPatch) -> list[Runtime]:
    """Every box the worker makes, as it makes them."""
    made: list[Runtime] = []
    real = episodes.session.launch.make_runtime

    def make_runtime(*args: Any, **kw: Any) -> Runtime:
        runtime = real(*args, **kw)
        made.append(runtime)
        return runtime

    monkeypatch.setattr(episodes.session.launch, "make_runtime", make_runtime)
    return made


def _spec(turn_mode: str, **harness: Any) -> Any:
    name = f"sbx-fo-{uuid.uuid4().hex[:6]}"
    return spec(
        name=name,
        env=ENDLESS,
        env_args={"done_at": 8, "gate": name, "gate_at": 4},
        max_turns=20,
        turn_timeout_s=60.0,
        turn_mode=turn_mode,
        harness={"runtime": {"type": "subprocess"}, "ready_timeout_s": 60.0, **harness},
    )


def _dead(p: psutil.Process) -> bool:
    try:
        return not p.is_running() or p.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def _start(client, s) -> Any:  # type: ignore[no-untyped-def]
    return await client.start_workflow(
        "EpisodeWorkflow",
        EpisodeInput(spec=s, task=s.tasks[0], batch=s.name),
        id=s.name,
        task_queue="episodes-test",
        result_type=EpisodeResult,
    )


@pytest.mark.parametrize("turn_mode", ["drive", "activity"])
async def test_a_sandbox_killed_from_outside_mid_episode_fails_over_and_ends_env_done(
    client, worker, boxes, turn_mode
) -> None:
    s = _spec(turn_mode)
    handle = await _start(client, s)

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
    [first] = boxes
    assert isinstance(first, SandboxRuntime) and first.bwrap_pid is not None
    inside = psutil.Process(first.bwrap_pid).children(recursive=True)  # the harness too
    os.kill(first.bwrap_pid, signal.SIGKILL)  # from outside: not the harness, not a limit
    # Dead before the env goes on: a drive runs the remaining turns in milliseconds,
    # which a kill still landing on a loaded machine would otherwise let through.
    assert await wait_until(lambda: all(_dead(p) for p in inside), timeout=60)
    opened.set()
    result = await asyncio.wait_for(handle.result(), 240)

    assert (result.termination, result.box_failovers, result.restarts) == ("env_done", 1, 0), (
        result.error,
        result,
        [(b.id, b.bwrap_pid, b.stopped) for b in boxes],  # type: ignore[attr-defined]
    )
    assert result.turns == 8 and result.turns_replayed >= 3
    # Every turn delivered once: the history holds turns 0..7, each message once, in order.
    transcript = await load_transcript(client, s.name)
    turns = [t["record"] for t in transcript["turns"]]
    assert [t["turn"] for t in turns] == list(range(8))
    assert [t["message"] for t in turns] == [f"m{i}" for i in range(8)]
    assert all(t["error_type"] is None for t in turns)
    assert len(boxes) == 2 and all(b.stopped for b in boxes)


async def test_a_harness_that_ends_its_own_sandbox_stays_harness_crashed(
    client, worker, boxes
) -> None:
    s = _spec("drive", command=["{python}", "-c", KILLS_ITS_BOX])
    gate(s.name)[1].set()  # nothing to wait for
    result = await asyncio.wait_for((await _start(client, s)).result(), 240)
    assert (result.termination, result.box_failovers) == ("harness_crashed", 0), result.error
    assert result.turns == 4 and len(boxes) == 1


async def test_an_interactive_session_whose_sandbox_is_killed_fails_over(
    client, worker, boxes
) -> None:
    """The trainer's next step runs on a fresh box, after the replay of the recorded
    turns; the trainer sees no failure, and the session ends as it would have."""
    from episodes.client import EpisodesClient

    s = spec(
        name=f"sbx-fo-inter-{uuid.uuid4().hex[:6]}",
        tasks=[{"id": "t0", "data": {"messages": ["a", "b", "c", "d"]}}],
        harness={"runtime": {"type": "subprocess"}, "ready_timeout_s": 60.0},
        turn_timeout_s=60.0,
    )
    session = await EpisodesClient(client, task_queue="episodes-test").open_session(s, s.tasks[0])
    first_steps = [await session.step("a"), await session.step("b")]
    assert [(r.reply, r.observation, r.done) for r in first_steps] == [
        ("a", "b", False),
        ("b", "c", False),
    ]
    [first] = boxes
    assert isinstance(first, SandboxRuntime) and first.bwrap_pid is not None
    inside = psutil.Process(first.bwrap_pid).children(recursive=True)
    os.kill(first.bwrap_pid, signal.SIGKILL)  # from outside, between two steps
    assert await wait_until(lambda: all(_dead(p) for p in inside), timeout=60)

    third = await session.step("c")
    assert (third.reply, third.observation, third.done, third.error) == ("c", "d", False, None)
    last = await session.step("d")
    assert last.done and last.termination == "env_done"
    result = await session.close()
    assert (result.termination, result.box_failovers, result.turns) == ("env_done", 1, 4), (
        result.error
    )
    progress = await session.progress()
    assert [t.message for t in progress.turns] == ["a", "b", "c", "d"]  # each once
    assert len(boxes) == 2
