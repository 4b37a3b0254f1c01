"""A blocking rubric beside healthy episodes (issue 19): one episode whose *sync*
`score()` sleeps 40 s (`score_timeout_s: 10`) and six healthy episodes of eight
1-second turns, all on one worker at once.

Before env code ran off the event loop, the sleep froze the worker: the healthy
episodes waited out the whole score (33 s instead of ~9 measured for a 25 s score), and
a 40 s one lost a neighbour to `worker_lost`. Now each healthy episode should take its
own ~8-9 s, and the blocker end `env_error` ("score timed out after 10 s") at its
timeout. Printed: each episode's termination and wall time from the common start.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from bench.common import ECHO, dev_server, running
from episodes.client.connect import connect
from episodes.client.core import EpisodesClient
from episodes.envs.base import Environment
from episodes.types.results import ScoreResult, StepOutcome, Task, Transcript
from episodes.types.spec import parse_spec
from workers.worker import EpisodeWorker, WorkerOptions


class SlowTurns(Environment):
    """Eight turns, each answered after the env thinks for `turn_s` (async: no thread)."""

    def reset(self, task: Task) -> Any:
        self.n = 0
        return "m0"

    async def step(self, reply: Any) -> StepOutcome:
        await asyncio.sleep(float(self.env_args.get("turn_s", 1.0)))
        self.n += 1
        return StepOutcome(message=f"m{self.n}", done=self.n >= 8, reward=1.0)


class BlockingScore(SlowTurns):
    """Done after one turn; its sync score sleeps like a rubric calling subprocess.run."""

    async def step(self, reply: Any) -> StepOutcome:
        return StepOutcome(done=True)

    def score(self, transcript: Transcript) -> ScoreResult:
        time.sleep(float(self.env_args.get("score_s", 40.0)))
        return ScoreResult(reward=1.0)


def _spec(name: str, env: str, **over: Any) -> Any:
    return parse_spec(
        {
            "name": name,
            "env": f"{__name__}:{env}",
            "tasks": [{"id": "t0"}],
            "harness": {"command": ECHO},
            "max_turns": 10,
            "turn_timeout_s": 30,
            **over,
        }
    )


async def run(quick: bool = False, repeats: int | None = None) -> dict:
    score_s, healthy = (12.0, 3) if quick else (40.0, 6)
    turn_s = 0.3 if quick else 1.0
    timeout_s = score_s / 4
    with dev_server() as server:
        client = await connect(server.address)
        queue = f"bench-blocking-{uuid.uuid4().hex[:6]}"
        worker = EpisodeWorker(client, WorkerOptions(task_queue=queue))
        async with running(worker):
            episodes = EpisodesClient(client, task_queue=queue)
            tag = uuid.uuid4().hex[:6]
            blocker = _spec(
                f"blocker-{tag}",
                "BlockingScore",
                env_args={"score_s": score_s},
                score_timeout_s=timeout_s,
            )
            started = time.monotonic()

            async def one(spec: Any, sample: int) -> tuple[str, str, float]:
                r = await episodes.run_episode(spec, spec.tasks[0], sample)
                return spec.name, r.termination, time.monotonic() - started

            jobs = [one(blocker, 0)]
            for i in range(healthy):
                jobs.append(
                    one(_spec(f"healthy-{tag}-{i}", "SlowTurns", env_args={"turn_s": turn_s}), 0)
                )
            done = await asyncio.gather(*jobs)
    rows = [{"episode": n, "termination": t, "wall_s": round(s, 2)} for n, t, s in done]
    for row in rows:
        print(f"  {row['episode']:<24} {row['termination']:<10} {row['wall_s']:6.2f} s")
    healthy_s = [r["wall_s"] for r in rows if r["episode"].startswith("healthy")]
    blocker_row = next(r for r in rows if r["episode"].startswith("blocker"))
    return {
        "settings": {
            "score_s": score_s,
            "score_timeout_s": timeout_s,
            "healthy": healthy,
            "turns": 8,
            "turn_s": turn_s,
        },
        "episodes": rows,
        "figures": {
            "healthy_max_wall_s": max(healthy_s),
            "healthy_alone_s": 8 * turn_s,
            "blocker_wall_s": blocker_row["wall_s"],
            "blocker_termination": blocker_row["termination"],
            "all_healthy_env_done": all(
                r["termination"] == "env_done" for r in rows if r["episode"].startswith("healthy")
            ),
        },
    }
