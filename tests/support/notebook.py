"""An env whose tools keep state, and a model policy that samples: for exact replay tests.

`sampling_policy` (for `ScriptedUpstream(policy=...)`) takes a note of each user
message, then replies with a freshly sampled word: a call that reached the upstream
again could never reproduce a recorded reply.
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from typing import Any

from episodes.envs.base import Environment
from episodes.types.results import ScoreResult, StepOutcome, Task, Transcript


class Notebook(Environment):
    """Never done; a `note` tool that keeps notes (its state a replay must rebuild).
    env_args: `delay_s`, a pause in each step."""

    def __init__(self, **env_args: Any) -> None:
        super().__init__(**env_args)
        self.notes: list[str] = []
        self.turns = 0

    def tools(self) -> list[Any]:
        def note(text: str) -> str:
            """Take a note."""
            self.notes.append(text)
            return f"noted #{len(self.notes)}"

        return [note]

    def reset(self, task: Task) -> Any:
        return "note m0"

    async def step(self, reply: Any) -> StepOutcome:
        await asyncio.sleep(self.env_args.get("delay_s", 0))
        self.turns += 1
        return StepOutcome(message=f"note m{self.turns}")

    def score(self, transcript: Transcript) -> ScoreResult:
        return ScoreResult(reward=float(len(self.notes)))


class DeterministicNotebook(Notebook):
    deterministic_tools = True


class ShortNotebook(DeterministicNotebook):
    """Done after `turns` turns (env_args, default 6): an episode that ends `env_done`."""

    async def step(self, reply: Any) -> StepOutcome:
        outcome = await super().step(reply)
        return StepOutcome(done=True) if self.turns >= self.env_args.get("turns", 6) else outcome


class RewardedNotebook(DeterministicNotebook):
    """Rewards the last reply by its hash (0 to 1): episodes that sampled their last
    replies anew score apart, so a group's advantages are not all 0."""

    def score(self, transcript: Transcript) -> ScoreResult:
        last = str(transcript.turns[-1].reply) if transcript.turns else ""
        return ScoreResult(reward=int(hashlib.sha256(last.encode()).hexdigest()[:4], 16) / 0xFFFF)


def sampling_policy(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
    """A note of the last user message, then a reply with a freshly sampled word."""
    last = messages[-1]
    if last.get("role") == "user":
        return {"tool_calls": [{"name": "note", "arguments": {"text": last["content"]}}]}
    return f"ok {uuid.uuid4().hex[:8]}"


NOTEBOOK = f"{__name__}:DeterministicNotebook"
SHORT_NOTEBOOK = f"{__name__}:ShortNotebook"
REWARDED_NOTEBOOK = f"{__name__}:RewardedNotebook"
