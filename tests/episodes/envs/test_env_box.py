"""An env reaches its episode's box in reset, step and score (`Environment.box`), through
Temporal on the worker; a box gone at score time is `env_error`, and score-time box
commands end within `score_timeout_s`."""

from __future__ import annotations

import time
import uuid

import pytest

from episodes.client.core import EpisodesClient
from episodes.envs.base import Environment
from episodes.errors import BoxGone
from episodes.local import run_episode_local
from episodes.runtimes.subprocess import MINIMAL_PATH
from tests.support.envs import BOX_WORK
from tests.support.helpers import spec


def _spec(**env_args):
    return spec(
        name=f"box-{uuid.uuid4().hex[:8]}",
        env=BOX_WORK,
        command=["{python}", "-m", "episodes.harness.reference.echo"],
        tasks=[{"id": "b0", "data": {"text": "graded where it happened"}}],
        env_args=env_args,
        score_timeout_s=3.0,
    )


async def test_env_grades_work_in_the_box_through_the_worker(client, worker) -> None:
    s = _spec()
    result = await EpisodesClient(client, task_queue="episodes-test").run_episode(s, s.tasks[0])
    assert result.termination == "env_done", result
    assert result.reward == 1.0
    assert result.score_details["out"] == "GRADED WHERE IT HAPPENED"


async def test_box_gone_at_score_time_is_env_error(client, worker) -> None:
    s = _spec(gone_at_score=True)
    result = await EpisodesClient(client, task_queue="episodes-test").run_episode(s, s.tasks[0])
    assert result.termination == "env_error", result
    assert "BoxGone" in (result.error or ""), result.error
    assert "box" in result.score_details["error"]
    assert result.reward is None


async def test_score_time_box_commands_end_within_score_timeout() -> None:
    s = _spec(slow_score=True)
    started = time.monotonic()
    result = await run_episode_local(s, s.tasks[0])
    assert result.termination == "env_done", result
    assert result.score_details == {"timed_out": True}
    assert time.monotonic() - started < 60  # a hang guard: the command asked for 600 s


def test_an_env_without_a_session_has_no_box() -> None:
    import asyncio

    import pytest

    with pytest.raises(BoxGone, match="not opened by a session"):
        asyncio.run(Environment().box.run(["true"]))


@pytest.mark.parametrize("name", ["subprocess", "sandbox"])
async def test_box_run_defaults_are_what_its_docstring_says(name: str) -> None:
    """`Box.run`'s documented defaults on the subprocess runtime: the box's own working
    directory, and PATH=/usr/local/bin:/usr/bin:/bin unless `env` sets one."""
    from episodes.runtimes.box import Box
    from tests.support import backends

    backend = next(b for b in backends.discover() if b.NAME == name)
    if backend.skip_reason():
        pytest.skip(backend.skip_reason())
    runtime = backend.make_runtime()
    await runtime.start()
    try:
        box = Box(runtime)
        r = await box.run('pwd; echo "$PATH"; echo "${HOME-unset}"')
        assert r.text().split("\n")[:3] == [runtime.workdir, MINIMAL_PATH, "unset"], r
        r = await box.run('echo "$PATH"', env={"PATH": "/opt/x:/usr/bin:/bin"})
        assert r.text().strip() == "/opt/x:/usr/bin:/bin"
        assert (await box.run("pwd", cwd="/")).text().strip() == "/"
    finally:
        await runtime.stop()
