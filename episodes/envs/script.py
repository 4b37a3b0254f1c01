"""`script`: a scripted user that sends fixed messages, one per turn.

    task.data = {"messages": ["hi", {"q": 2}], "expected": ["hi", {"q": 2}]}   # expected optional

`reset` returns messages[0]; each reply moves to the next message; the episode is done
after the reply to the last one. Reward = fraction of replies equal to `expected`
(None without `expected`); the score details list each turn's match.
"""

from __future__ import annotations

from typing import Any

from episodes.envs.base import Environment
from episodes.types.results import ScoreResult, StepOutcome, Task, Transcript


class ScriptEnv(Environment):
    name = "script"
    #: The task.data key holding the messages; subclasses send other things.
    messages_key = "messages"

    def __init__(self) -> None:
        super().__init__()
        self._messages: list[Any] = []
        self._expected: list[Any] | None = None
        self._replies: list[Any] = []
        self._done = False

    # -- the script ----------------------------------------------------------------

    def _read_task(self, task: Task) -> tuple[list[Any], list[Any] | None]:
        key = self.messages_key
        messages = task.data.get(key)
        if not isinstance(messages, list) or not messages:
            raise ValueError(
                f"{self.name} env: task {task.id!r}: data.{key} must be a non-empty list"
            )
        expected = task.data.get("expected")
        if expected is not None and (
            not isinstance(expected, list) or len(expected) != len(messages)
        ):
            raise ValueError(
                f"{self.name} env: task {task.id!r}: data.expected must be a list with one "
                f"entry per {key[:-1]} ({len(messages)})"
            )
        return messages, expected

    def matches(self, reply: Any, expected: Any) -> bool:
        """Whether one reply counts as correct; subclasses loosen this."""
        return reply == expected

    def _reward(
        self, replies: list[Any], expected: list[Any] | None
    ) -> tuple[float | None, list[bool]]:
        if expected is None:
            return None, []
        # A turn that never got a reply (harness failed first) counts as a miss.
        padded = replies[: len(expected)] + [_MISSING] * (len(expected) - len(replies))
        hits = [
            r is not _MISSING and self.matches(r, e) for r, e in zip(padded, expected, strict=True)
        ]
        return sum(hits) / len(hits), hits

    # -- Environment API ---------------------------------------------------------

    def reset(self, task: Task) -> Any:
        self._messages, self._expected = self._read_task(task)
        self._replies = []
        self._done = False
        return self._messages[0]

    def step(self, reply: Any) -> StepOutcome:
        if self._done or not self._messages:
            raise RuntimeError(f"{self.name} env: step() called after done or before reset()")
        self._replies.append(reply)
        n = len(self._replies)
        if n < len(self._messages):
            return StepOutcome(message=self._messages[n])
        self._done = True
        reward, _ = self._reward(self._replies, self._expected)
        return StepOutcome(done=True, reward=reward)

    def score(self, transcript: Transcript) -> ScoreResult:
        # From the transcript, not from step() state: the rubric sees what was recorded.
        messages, expected = self._read_task(transcript.task)
        replies = [_MISSING if t.error is not None else t.reply for t in transcript.turns]
        reward, hits = self._reward(replies, expected)
        details: dict[str, Any] = {"turns": len(transcript.turns), "messages": len(messages)}
        if expected is not None:
            details["matches"] = hits
        return ScoreResult(reward=reward, details=details)


_MISSING = object()
