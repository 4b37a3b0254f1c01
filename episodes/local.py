"""Run one episode in this process, without Temporal.

The same LiveSession the worker uses, driven by a plain loop: handy for tests,
benchmarks and debugging an environment or a harness before going durable.
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING

from episodes.errors import EnvironmentFailed, HarnessFailure
from episodes.session import LiveSession
from episodes.types.results import EpisodeResult, ScoreResult, Task, Termination
from episodes.types.spec import EpisodeSpec

if TYPE_CHECKING:
    from episodes.runtimes.pool import RuntimePool


async def run_episode_local(
    spec: EpisodeSpec, task: Task, sample: int = 0, *, pool: RuntimePool | None = None
) -> EpisodeResult:
    started = time.monotonic()
    session = LiveSession(spec, task, sample, f"local-{uuid.uuid4().hex[:12]}", pool=pool)
    termination: Termination = "max_turns"
    error: str | None = None
    turns = 0
    try:
        try:
            await session.open()
        except HarnessFailure as e:
            termination, error = e.error_type, str(e)
        else:
            for n in range(spec.max_turns):
                result = await session.turn(n)
                turns = n + 1
                if result.observation.done:
                    termination = result.termination or "env_done"
                    error = result.record.error
                    break
        try:
            score = await _score(session, termination, error)
        except EnvironmentFailed as e:
            termination, error = "env_error", session.scrub_error(e)
            score = ScoreResult(details={"error": error.splitlines()[0]})
    finally:
        await session.close()
    return EpisodeResult(
        workflow_id=session.session_id,
        task_id=task.id,
        sample=sample,
        env=spec.env,
        spec_name=spec.name,
        termination=termination,
        error=error,
        turns=turns,
        reward=score.reward,
        score_details=score.details,
        duration_s=time.monotonic() - started,
    )


async def _score(session: LiveSession, termination: Termination, error: str | None) -> ScoreResult:
    from episodes.envs import load_env
    from episodes.session import score_transcript

    if session.env is not None:
        return await session.score(termination)
    # The harness never started: score the (empty) transcript with a fresh env.
    env = load_env(session.spec.env, session.spec.env_args)
    return await score_transcript(env, session.transcript(termination, error))
