"""The environment of `bench.scale`'s episodes, run in each worker process.

It holds every episode at a barrier after turn 0 until the benchmark opens it, so the
benchmark knows when N sessions are live at once (each drops a marker file when it
reaches the barrier), and it stamps the provision: when the worker asked for the box
(`box_config`, the step before the runtime starts one) and when the harness was ready
(`reset`). Its `score` hands every stamp back in the result's `score_details`.

Kept apart from `bench.scale` so a worker imports only this and the env base class.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from pathlib import Path
from typing import Any

from episodes.envs.base import Environment
from episodes.types.results import ScoreResult, StepOutcome, Task, Transcript

# One poller per gate file per worker process, however many sessions wait on it.
_gates: dict[str, asyncio.Event] = {}


async def _poll(path: str, opened: asyncio.Event) -> None:
    while not os.path.exists(path):
        await asyncio.sleep(0.2)
    opened.set()


async def wait_gate(path: str) -> None:
    """Until the file `path` exists (one poll task per path in this process)."""
    opened = _gates.get(path)
    if opened is None:
        opened = _gates[path] = asyncio.Event()
        # The event keeps the task alive: it ends when the file appears.
        opened.poller = asyncio.ensure_future(_poll(path, opened))  # type: ignore[attr-defined]
    await opened.wait()


class ScaleEnv(Environment):
    """`turns` turns; after turn 0, wait for `gate` (having dropped a marker in `ready`)."""

    def __init__(self, gate: str = "", ready: str = "", turns: int = 10) -> None:
        super().__init__(gate=gate, ready=ready, turns=turns)
        self.gate, self.ready, self.turns = gate, ready, int(turns)
        self.box_ns = 0
        self.reset_ns = 0
        self.replies: list[Any] = []

    async def box_config(self, task: Task, config: Any) -> Any:
        self.box_ns = time.monotonic_ns()
        return config

    async def reset(self, task: Task) -> Any:
        self.reset_ns = time.monotonic_ns()
        return "m0"

    async def step(self, reply: Any) -> StepOutcome:
        self.replies.append(reply)
        n = len(self.replies)
        if n == 1 and self.gate:
            Path(self.ready, f"{os.getpid()}-{uuid.uuid4().hex[:12]}").touch()
            await wait_gate(self.gate)
        if n >= self.turns:
            return StepOutcome(done=True, reward=1.0)
        return StepOutcome(message=f"m{n}")

    async def score(self, transcript: Transcript) -> ScoreResult:
        return ScoreResult(
            reward=1.0,
            details={
                "box_ns": self.box_ns,
                "reset_ns": self.reset_ns,
                "worker_pid": os.getpid(),
                "turns": [[r["recv_ns"], r["send_ns"]] for r in self.replies],
                "start_ns": self.replies[0]["start_ns"] if self.replies else 0,
                "harness_pid": self.replies[0]["pid"] if self.replies else 0,
            },
        )
