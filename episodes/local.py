"""Run one episode in this process, without Temporal.

The same LiveSession and the same turn loop (`episodes.session.drive.TurnLoop`) the
worker's `drive` uses, with an in-memory sink: handy for tests, benchmarks (like for
like with the durable run) and debugging an environment or a harness before going
durable.
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING

from episodes.errors import EnvironmentFailed, HarnessFailure
from episodes.session.drive import MemorySink, TurnLoop
from episodes.session.live import LiveSession
from episodes.types.io import DriveResult
from episodes.types.results import EpisodeResult, ScoreResult, Task, Termination
from episodes.types.spec import EpisodeSpec

if TYPE_CHECKING:
    from episodes.runtimes.pool.runtime_pool import RuntimePool


async def run_episode_local(
    spec: EpisodeSpec, task: Task, sample: int = 0, *, pool: RuntimePool | None = None
) -> EpisodeResult:
    started = time.monotonic()
    session = LiveSession(spec, task, sample, f"local-{uuid.uuid4().hex[:12]}", pool=pool)
    try:
        try:
            await session.open()
        except (HarnessFailure, EnvironmentFailed) as e:
            # The harness never started, or the env's reset raised: no reset, no score
            # (a fresh env's score() would grade an episode that never happened).
            termination: Termination = (
                e.error_type if isinstance(e, HarnessFailure) else "env_error"
            )
            ended = DriveResult(termination=termination, error=str(e), next_turn=0)
        else:
            ended = await TurnLoop(session, MemorySink(), max_turns=spec.max_turns).run()
    finally:
        await session.close()
    score = ended.score or ScoreResult()
    return EpisodeResult(
        workflow_id=session.session_id,
        task_id=task.id,
        sample=sample,
        env=spec.env,
        spec_name=spec.name,
        termination=ended.termination or "max_turns",
        error=ended.error,
        turns=ended.next_turn,
        reward=score.reward,
        score_details=score.details,
        duration_s=time.monotonic() - started,
    )
