"""Issue 41: what an acknowledgement costs, and `on_stale: keep` beside `requeue` on
real episodes, side by side in one run.

Acknowledgements: `Receipts.ack` (one signal-with-start to the batch's receipts
workflow) `acks` times in a row, then reading them all back (`read_receipts`, what a
restarted trainer's stream does once), on a tuned dev server with one worker.

Staleness: one batch per policy, alternating, on the same server and worker: `tasks`
tasks of 2 samples, one turn each, whose env answers after `short_s`, or 10 times that
for a quarter of the tasks; 16 episodes in flight, `max_staleness` 2, the trainer
stepping (policy version + 1, no real training) every 2 groups it receives. Per
policy: wall time, groups/s, long groups yielded and how many of them within the
first three quarters of the groups, groups re-dispatched, episodes run again, the
largest `group.staleness`.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from typing import Any

from bench.common import ECHO, dev_server, running
from episodes.client.connect import connect
from episodes.client.core import EpisodesClient
from episodes.client.group.receipts import Receipts, read_receipts
from episodes.envs.base import Environment
from episodes.types.results import StepOutcome, Task
from episodes.types.spec import parse_spec
from workers.worker import EpisodeWorker, WorkerOptions

LONG_EVERY = 4


class Timed(Environment):
    """One turn, answered after the task's `seconds` (async: no thread)."""

    def reset(self, task: Task) -> Any:
        self.seconds = float(task.data["seconds"])
        return "go"

    async def step(self, reply: Any) -> StepOutcome:
        await asyncio.sleep(self.seconds)
        return StepOutcome(done=True, reward=1.0)


def _spec(tasks: int, short_s: float) -> Any:
    return parse_spec(
        {
            "name": f"stale-{uuid.uuid4().hex[:6]}",
            "env": f"{__name__}:Timed",
            "tasks": [
                {
                    "id": f"t{i}",
                    "data": {"seconds": short_s * (10 if i % LONG_EVERY == LONG_EVERY - 1 else 1)},
                }
                for i in range(tasks)
            ],
            "samples": 2,
            "harness": {"command": ECHO},
            "max_turns": 2,
            "turn_timeout_s": 120,
            # A model so the groups carry a policy version; no episode calls it.
            "model": {"base_url": "http://127.0.0.1:9/v1", "model": "none"},
        }
    )


async def _acks(client: Any, queue: str, n: int) -> dict[str, Any]:
    batch = f"acks-{uuid.uuid4().hex[:6]}"
    r = Receipts(client, queue, batch, groups=n + 1)  # +1: it stays open
    ms = []
    for i in range(n):
        t0 = time.perf_counter()
        await r.ack(f"{batch}/t{i}")
        ms.append((time.perf_counter() - t0) * 1e3)
    t0 = time.perf_counter()
    state = await read_receipts(client, batch)
    read_ms = (time.perf_counter() - t0) * 1e3
    assert len(state.acks) == n
    return {
        "acks": n,
        "ack_ms_median": statistics.median(ms),
        "ack_ms_min": min(ms),
        "ack_ms_max": max(ms),
        "ack_ms_p95": sorted(ms)[int(0.95 * (n - 1))],
        "read_all_ms": read_ms,
    }


async def _policy(ec: EpisodesClient, spec: Any, on_stale: str) -> dict[str, Any]:
    groups = []
    started = time.monotonic()
    agen = ec.run_batch(
        spec,
        groups=True,
        batch_id=f"{spec.name}-{on_stale}",
        policy_version=0,
        max_staleness=2,
        on_stale=on_stale,
        concurrency=16,
    )
    async for g in agen:
        groups.append(g)
        if len(groups) % 2 == 0:
            ec.policy_version = (ec.policy_version or 0) + 1
    wall = time.monotonic() - started
    long = [int(g.task_id[1:]) % LONG_EVERY == LONG_EVERY - 1 for g in groups]
    first = len(groups) * 3 // 4
    return {
        "wall_s": wall,
        "groups": len(groups),
        "groups_per_s": len(groups) / wall,
        "long_groups": sum(long),
        "long_groups_in_first_three_quarters": sum(long[:first]),
        "groups_redispatched": sum(g.stale for g in groups),
        "episodes_rerun": sum(g.stale for g in groups) * 2,  # a stale group runs again whole
        "max_staleness_seen": max(g.staleness or 0 for g in groups),
    }


async def run(quick: bool = False, repeats: int | None = None) -> dict:
    acks = 50 if quick else 200
    tasks, short_s = (16, 0.3) if quick else (32, 0.5)
    repeats = repeats or (1 if quick else 2)
    with dev_server() as server:
        client = await connect(server.address)
        queue = f"bench-stale-{uuid.uuid4().hex[:6]}"
        worker = EpisodeWorker(client, WorkerOptions(task_queue=queue))
        async with running(worker):
            ack = await _acks(client, queue, acks)
            print(
                f"  ack: {ack['ack_ms_median']:.2f} ms median "
                f"[{ack['ack_ms_min']:.2f}..{ack['ack_ms_max']:.2f}], p95 "
                f"{ack['ack_ms_p95']:.2f}; reading {acks} back: {ack['read_all_ms']:.1f} ms"
            )
            runs: dict[str, list[dict[str, Any]]] = {"keep": [], "requeue": []}
            for _ in range(repeats):
                for policy in ("keep", "requeue"):
                    ec = EpisodesClient(client, task_queue=queue)
                    r = await _policy(ec, _spec(tasks, short_s), policy)
                    runs[policy].append(r)
                    print(
                        f"  {policy:<8} {r['wall_s']:6.1f} s  {r['groups_per_s']:.2f} groups/s  "
                        f"long {r['long_groups']} ({r['long_groups_in_first_three_quarters']} "
                        f"in the first 3/4)  re-dispatched {r['groups_redispatched']}  "
                        f"max lag {r['max_staleness_seen']}"
                    )
    med = {p: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for p, rs in runs.items()}
    return {
        "settings": {
            "acks": acks,
            "tasks": tasks,
            "short_s": short_s,
            "long_x": 10,
            "max_staleness": 2,
            "concurrency": 16,
            "step_every": 2,
            "repeats": repeats,
        },
        "acknowledgement": ack,
        "runs": runs,
        "figures": {
            "ack_ms_median": ack["ack_ms_median"],
            "keep_groups_per_s": med["keep"]["groups_per_s"],
            "requeue_groups_per_s": med["requeue"]["groups_per_s"],
            "keep_long_in_first_three_quarters": med["keep"]["long_groups_in_first_three_quarters"],
            "requeue_long_in_first_three_quarters": med["requeue"][
                "long_groups_in_first_three_quarters"
            ],
            "requeue_groups_redispatched": med["requeue"]["groups_redispatched"],
        },
    }
