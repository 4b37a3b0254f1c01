"""The score's defects of issue 19, on a real worker: a score past `score_timeout_s`, a
score that raises, and an env that was never reset are outcomes (`env_error`, no
reward), never a failed workflow nor a reward for nothing."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from temporalio.exceptions import ApplicationError

from activities.session import score_transcript_activity
from episodes import contract
from episodes.client import EpisodesClient
from episodes.local import run_episode_local
from episodes.types.io import ScoreTranscriptInput
from episodes.types.results import Task, Transcript
from tests.conftest import scripted_command
from tests.support.envs import ENDLESS, FAULTY, GATED_SCORE, SCORES, gate
from tests.support.helpers import spec, wait_until

QUEUE = "episodes-test"


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def _held(worker, workflow_id: str) -> bool:  # type: ignore[no-untyped-def]
    return any(e.workflow_id == workflow_id for e in worker.registry.entries())


async def test_a_sync_score_past_its_timeout_is_env_error_abandoned_and_released(
    client, worker
) -> None:
    name = _name("slowscore")
    _, opened = gate(name)
    s = spec(name=name, env=GATED_SCORE, env_args={"gate": name, "max_s": 20}, score_timeout_s=1)
    try:
        result = await asyncio.wait_for(
            EpisodesClient(client, task_queue=QUEUE).run_episode(s, s.tasks[0]), 60
        )
        # Before: the score ran to its end (`max_s`) and the episode ended env_done.
        assert (result.termination, result.error) == ("env_error", "score timed out after 1 s")
        assert result.reward is None and result.score_details == {"error": result.error}
        assert not opened.is_set() and SCORES[name] == 1  # abandoned, not run again
        assert await wait_until(lambda: not _held(worker, result.workflow_id), timeout=10)
    finally:
        opened.set()


async def test_an_async_score_past_its_timeout_is_env_error(client, worker) -> None:
    s = spec(
        name=_name("hangscore"),
        env=FAULTY,
        env_args={"on": "score", "hang_s": 15},
        score_timeout_s=1,
    )
    result = await asyncio.wait_for(
        EpisodesClient(client, task_queue=QUEUE).run_episode(s, s.tasks[0]), 60
    )
    assert (result.termination, result.error) == ("env_error", "score timed out after 1 s")
    assert not _held(worker, result.workflow_id)


async def test_a_score_that_raises_is_env_error_not_a_failed_workflow(client, worker) -> None:
    s = spec(name=_name("raisescore"), env=FAULTY, env_args={"on": "score_raise"})
    # Before: the drive failed, was retried, and the workflow failed.
    result = await asyncio.wait_for(
        EpisodesClient(client, task_queue=QUEUE).run_episode(s, s.tasks[0]), 60
    )
    assert (result.termination, result.reward) == ("env_error", None)
    assert "score() raised ValueError: score-canary" in (result.error or "")
    assert "score-canary" in result.score_details["error"]


async def test_the_fallback_score_raising_is_a_non_retryable_env_error() -> None:
    transcript = Transcript(task=Task(id="t"), turns=[])
    with pytest.raises(ApplicationError) as e:
        await score_transcript_activity(
            ScoreTranscriptInput(env=FAULTY, env_args={"on": "score_raise"}, transcript=transcript)
        )
    assert e.value.type == contract.ENV_ERROR and e.value.non_retryable
    assert "score-canary" in e.value.message


async def test_an_episode_whose_harness_never_started_gets_no_reward(client, worker) -> None:
    # ENDLESS scores 1.0 whatever it is shown: a fresh env's score() would reward nothing.
    s = spec(name=_name("nostart"), env=ENDLESS, command=scripted_command("exit-now"))
    result = await asyncio.wait_for(
        EpisodesClient(client, task_queue=QUEUE).run_episode(s, s.tasks[0]), 60
    )
    assert (result.termination, result.reward) == ("harness_start_failed", None)
    local = await run_episode_local(s, s.tasks[0])
    assert (local.termination, local.reward) == ("harness_start_failed", None)


async def test_an_env_whose_reset_raised_gets_no_reward(client, worker) -> None:
    s = spec(name=_name("noreset"), env=FAULTY, env_args={"on": "reset"})
    result = await asyncio.wait_for(
        EpisodesClient(client, task_queue=QUEUE).run_episode(s, s.tasks[0]), 60
    )
    assert (result.termination, result.turns, result.reward) == ("env_error", 0, None)
    local = await run_episode_local(s, s.tasks[0])
    assert (local.termination, local.reward) == ("env_error", None)
    assert "reset() raised KeyError" in (local.error or "")
