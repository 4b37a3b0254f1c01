"""`kv-store`: the agent must leave given key/values in a store it changes with tools.

The first tool-using built-in: the store lives in this env object on the worker,
the harness changes it only through the MCP tools `put`, `get`, `list_keys` and
`delete` (see `Environment.tools`), and the reward reads the store itself, not
what the agent claims.

    task.data: {"goal": {"a": "1", "b": "2"},     # must be in the store at the end
                "initial": {"b": "wrong"}}         # optional starting contents
    reset -> {"instruction": "...", "goal": {...}, "tools": ["put", ...]}
    reply:   anything; "done" (the word alone, or {"done": true}) ends it
    step  -> done when the agent says done or the goal is met, else a progress note

Reward: the fraction of goal entries present in the store with the right value.
"""

from __future__ import annotations

import re
from typing import Any

from episodes.envs.base import Environment
from episodes.types.results import ScoreResult, StepOutcome, Task, Transcript

TOOL_NAMES = ["put", "get", "list_keys", "delete"]


def _string_map(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ValueError(f"kv-store: {where} must be an object of string keys to string values")
    return dict(value)


def says_done(reply: Any) -> bool:
    if isinstance(reply, dict):
        return reply.get("done") is True or says_done(reply.get("text"))
    # The word alone, not "not done yet": a reply that mentions it is not a claim.
    return isinstance(reply, str) and re.fullmatch(r"\W*done\W*", reply, re.IGNORECASE) is not None


class KvStoreEnv(Environment):
    name = "kv-store"
    # put/get/delete on the store alone: replayed, they rebuild it exactly.
    deterministic_tools = True

    def __init__(self, **env_args: Any) -> None:
        super().__init__(**env_args)
        # Ready before reset: a harness may call a tool as soon as it starts.
        self.store: dict[str, str] = {}
        self.goal: dict[str, str] = {}
        self.tool_calls = 0

    # -- the episode -------------------------------------------------------------------

    def reset(self, task: Task) -> Any:
        self.goal = _string_map(task.data.get("goal"), f"task {task.id!r} data.goal")
        if not self.goal:
            raise ValueError(f"kv-store: task {task.id!r} data.goal is empty")
        self.store = _string_map(task.data.get("initial", {}), f"task {task.id!r} data.initial")
        return {
            "instruction": (
                "Use the tools put, get, list_keys and delete so that the key/value store "
                "holds every entry of `goal` (other keys do not matter). "
                "Reply 'done' when you are finished."
            ),
            "goal": dict(self.goal),
            "tools": list(TOOL_NAMES),
        }

    def step(self, reply: Any) -> StepOutcome:
        right = len(self.correct_keys(self.goal))
        if says_done(reply) or right == len(self.goal):
            return StepOutcome(done=True, reward=right / len(self.goal))
        return StepOutcome(
            message={
                "progress": f"{right} of {len(self.goal)} goal entries are in the store",
                "hint": "use the tools, then reply 'done'",
            }
        )

    def score(self, transcript: Transcript) -> ScoreResult:
        # The goal comes from the task, the contents from the live store the tools
        # changed: what the agent said it did does not count.
        goal = _string_map(transcript.task.data.get("goal", {}), "data.goal")
        correct = self.correct_keys(goal)
        return ScoreResult(
            reward=len(correct) / len(goal) if goal else 0.0,
            details={
                "store": dict(self.store),
                "correct": correct,
                "missing": sorted(k for k in goal if k not in self.store),
                "wrong": sorted(k for k in goal if k in self.store and self.store[k] != goal[k]),
                "tool_calls": self.tool_calls,
            },
        )

    def correct_keys(self, goal: dict[str, str]) -> list[str]:
        return sorted(k for k, v in goal.items() if self.store.get(k) == v)

    # -- the tools (served over MCP; names, hints and docstrings are the schema) --------

    def tools(self) -> list[Any]:
        return [self.put, self.get, self.list_keys, self.delete]

    def put(self, key: str, value: str) -> str:
        """Store `value` under `key`, replacing any value it had."""
        self.tool_calls += 1
        self.store[key] = value
        return f"stored {key!r}"

    def get(self, key: str) -> str:
        """The value stored under `key`; an error if there is none."""
        self.tool_calls += 1
        if key not in self.store:
            raise LookupError(f"no key {key!r} in the store")
        return self.store[key]

    def list_keys(self) -> list[str]:
        """Every key in the store, sorted."""
        self.tool_calls += 1
        return sorted(self.store)

    def delete(self, key: str) -> bool:
        """Remove `key` from the store; true if it was there."""
        self.tool_calls += 1
        return self.store.pop(key, None) is not None
