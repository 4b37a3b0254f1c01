"""The `harbor` env: a Harbor task (Terminal-Bench 2.0 format) as a durable episode.

Per episode, on the worker (docs/harbor.md):
- `box_config`: the task's image (built once per host, `image.py`) and its limits
  (cpus, memory, network, variables, workdir) as the box's DockerConfig, with the
  runtime bundle mounted so the relay and the built-in harnesses need no Python there;
- `reset`: the first instruction (the task's, or its first step's); with the oracle
  harness, the reference solution goes to /solution first;
- `step` (after each turn): the verifier. The processes the agent left behind are
  ended (the live harness is spared), `tests/` goes to /tests, `test.sh` runs in
  the box, the reward is /logs/verifier/reward.txt or reward.json. A multi-step task
  then gives the next step's instruction (or ends: the last step, or a step below
  its `min_reward`); a single-step task whose tests failed gets its test output as a
  follow-up turn while `retries` (the spec's `harbor_retries`) last;
- `score`: the episode's reward from the verified steps (`multi_step_reward_strategy`:
  mean, default, or final). A last turn that ended without a verdict (the harness
  timed out or crashed) is verified now, as Harbor verifies after an agent timeout.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from episodes.envs.base import Environment
from episodes.envs.harbor import reward as reward_file
from episodes.envs.harbor.task import HarborTask, Step, load_task
from episodes.errors import SpecError
from episodes.types.results import ScoreResult, StepOutcome, Task, Transcript
from episodes.types.runtime import DockerConfig, RuntimeConfig

VERIFIER_DIR = "/logs/verifier"
OUTPUT_TAIL = 3000
# Runs a task script with bash when the image has it (Harbor's scripts are bash), else sh.
RUN_SCRIPT = 'if command -v bash >/dev/null 2>&1; then exec bash "$0"; else exec sh "$0"; fi'


class HarborEnv(Environment):
    """env_args (set from the spec by `harbor:`): `retries` (follow-up turns after failed
    tests, single-step tasks), `solution` (put the reference solution in the box: the
    oracle harness)."""

    name = "harbor"

    def __init__(self, retries: int = 0, solution: bool = False, **env_args: Any) -> None:
        if env_args:
            raise TypeError(f"unknown env_args for harbor: {', '.join(sorted(env_args))}")
        if retries < 0:
            raise ValueError("retries must be >= 0")
        super().__init__(retries=retries, solution=solution)
        self.retries = retries
        self.solution = solution
        self.task: HarborTask | None = None
        self.index = 0  # the step the agent is on
        self.results: list[dict[str, Any]] = []  # one per verification, in order
        self.verified_turns = 0
        self.retries_used = 0

    # -- the box ---------------------------------------------------------------------------

    def _load(self, task: Task) -> HarborTask:
        if self.task is None:
            path = task.data.get("path")
            if not isinstance(path, str):
                raise SpecError(f"harbor task {task.id}: task data has no 'path' to its directory")
            self.task = load_task(Path(path))
        return self.task

    async def box_config(self, task: Task, config: RuntimeConfig) -> RuntimeConfig:
        from episodes.envs.harbor.image import ensure_image

        harbor = self._load(task)
        if not isinstance(config, DockerConfig):
            raise SpecError(f"harbor tasks run on the docker runtime, not {config.type}")
        image = await asyncio.to_thread(ensure_image, harbor)
        env = harbor.config.environment
        network = (
            "none"
            if not env.allow_internet
            else (config.network if config.network != "none" else "bridge")
        )
        return config.model_copy(
            update={
                "image": image.tag,
                "limits": config.limits.model_copy(
                    update={"cpus": env.cpus, "memory": env.memory_bytes_mb * 2**20}
                ),
                "network": network,
                "env": {**config.env, **env.env},
                "workdir": env.workdir or image.workdir,
                "user": harbor.config.agent.user or "0:0",
                "read_only": False,
                "capabilities": "default",
                "runtime_bundle": True,
            }
        )

    # -- turns -----------------------------------------------------------------------------

    async def reset(self, task: Task) -> str:
        harbor = self._load(task)
        made = await self.box.run(["mkdir", "-p", VERIFIER_DIR, "/logs/agent"])
        if not made.ok:
            raise RuntimeError(f"cannot make {VERIFIER_DIR} in the box: {made.text('stderr')}")
        return await self._begin(harbor.steps[0])

    async def _begin(self, step: Step) -> str:
        """Before the agent's turn on `step`: its timeout, and the oracle's solution."""
        self.turn_timeout_s = step.agent_timeout_s
        if self.solution:
            assert self.task is not None
            await self.box.run(["rm", "-rf", "/solution"])
            if step.solution is not None:
                await self.box.copy_in(step.solution, "/solution")
                extra = json.dumps(self.task.config.solution.env)
                await self.box.write_file("/solution/.episodes-env.json", extra)
        return step.instruction

    async def step(self, reply: Any) -> StepOutcome:
        assert self.task is not None
        step = self.task.steps[self.index]
        verdict = await self._verify(step)
        self.verified_turns += 1
        reward = verdict["reward"]
        if self.task.multi_step:
            if not _meets(verdict, step.min_reward) or self.index + 1 == len(self.task.steps):
                return StepOutcome(done=True, reward=reward)
            self.index += 1
            message = await self._begin(self.task.steps[self.index])
            return StepOutcome(message=message, reward=reward)
        failed = reward is None or reward < 1.0
        if failed and self.retries_used < self.retries:
            self.retries_used += 1
            return StepOutcome(message=_follow_up(verdict), reward=reward)
        return StepOutcome(done=True, reward=reward)

    async def _verify(self, step: Step) -> dict[str, Any]:
        """Run the step's tests in the box; its verdict (recorded in `results`). First
        every process the agent left behind is ended (`Box.sweep_orphans`): one still
        running could rewrite the reward after test.sh wrote it (reward hacking). The
        live harness and its own children are spared: a multi-step task keeps them
        across its steps (docs/harbor.md, "Verification")."""
        box = self.box
        if not await box.sweep_orphans():
            raise RuntimeError(
                "processes the agent left in the box could not be ended before its tests: "
                "no verdict is trusted while they run"
            )
        await box.run(["/bin/sh", "-c", f"rm -rf /tests {VERIFIER_DIR}/*; mkdir -p /tests"])
        for tests in step.tests:
            await box.copy_in(tests, "/tests")
        run = await box.run(
            ["/bin/sh", "-c", RUN_SCRIPT, "/tests/test.sh"],
            env=step.verifier.env,
            timeout_s=step.verifier.timeout_sec,
        )
        output = (run.text() + run.text("stderr"))[-OUTPUT_TAIL:]
        verdict: dict[str, Any] = {
            "step": step.name,
            "exit_code": run.exit_code,
            "timed_out": run.timed_out,
            "output": output,
        }
        verdict.update(await self._reward(box))
        self.results.append(verdict)
        return verdict

    async def _reward(self, box: Any) -> dict[str, Any]:
        """The verdict's reward; RewardError (the episode's env_error) when the verifier
        wrote one that is not a finite number (`reward.py`)."""
        try:
            raw = await box.read_file(f"{VERIFIER_DIR}/reward.txt", max_bytes=4096)
        except FileNotFoundError:
            pass
        else:
            return {"reward": reward_file.parse_txt(raw, f"{VERIFIER_DIR}/reward.txt")}
        try:
            raw = await box.read_file(f"{VERIFIER_DIR}/reward.json", max_bytes=1024 * 1024)
        except FileNotFoundError:
            return {"reward": None, "error": "the tests wrote no reward.txt or reward.json"}
        reward, data = reward_file.parse_json(raw, f"{VERIFIER_DIR}/reward.json")
        if reward is None:
            return {"reward": None, "rewards": data, "error": "reward.json has no 'reward' key"}
        return {"reward": reward, "rewards": data}

    # -- the score -------------------------------------------------------------------------

    async def score(self, transcript: Transcript) -> ScoreResult:
        task = self._load(transcript.task)
        if len(transcript.turns) > self.verified_turns and self.index < len(task.steps):
            # The last turn ended without the env's step (a timeout, a crash): verify now.
            await self._verify(task.steps[self.index])
        rewards = [r["reward"] for r in self.results]
        if not rewards:
            reward = None
        elif task.multi_step and task.strategy == "final":
            reward = rewards[-1]
        elif task.multi_step:
            reward = sum(r or 0.0 for r in rewards) / len(rewards)
        else:
            reward = rewards[-1]
        details: dict[str, Any] = {"task": task.name, "verifications": self.results}
        if task.multi_step:
            details["strategy"] = task.strategy
            details["steps_run"] = len(self.results)
            details["steps"] = len(task.steps)
        if self.retries:
            details["follow_ups"] = self.retries_used
        if self.results and "rewards" in self.results[-1]:
            details["rewards"] = self.results[-1]["rewards"]
        if task.not_enforced():
            details["not_enforced"] = task.not_enforced()
        return ScoreResult(reward=reward, details=details)


def _meets(verdict: dict[str, Any], minimum: float | dict[str, float] | None) -> bool:
    if minimum is None:
        return True
    if isinstance(minimum, dict):
        rewards = verdict.get("rewards") or {"reward": verdict["reward"]}
        return all(
            reward_file.finite(rewards.get(k)) and rewards[k] >= v for k, v in minimum.items()
        )
    return verdict["reward"] is not None and verdict["reward"] >= minimum


def _follow_up(verdict: dict[str, Any]) -> str:
    why = verdict.get("error") or f"reward {verdict['reward']}"
    return (
        f"The task's tests failed ({why}). Their output:\n\n{verdict['output']}\n\n"
        "Fix the problem and finish the task."
    )
