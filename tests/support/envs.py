"""Environments for integration tests, importable by the in-process workers by name."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from episodes.envs.base import Environment
from episodes.types.results import ScoreResult, StepOutcome, Task, Transcript


class Endless(Environment):
    """Never done: the episode ends at max_turns. Scores how many turns it was shown.

    env_args: `delay_s`, a pause in each step (turns slower than an Update's round
    trip); `pad`, characters appended to every message (big turns); `done_at`, the
    step count at which it says done after all (an episode that ends `env_done`);
    `gate` and `gate_at`: the step that reaches that count says so and waits until the
    test opens the gate named `gate` (`gate(name)`: reached, open), so the test acts
    mid-episode, not racing it (every later reset and replay passes the open gate).
    """

    def reset(self, task: Task) -> Any:
        self.n = 0
        return self._message()

    async def step(self, reply: Any) -> StepOutcome:
        await asyncio.sleep(self.env_args.get("delay_s", 0))
        self.n += 1
        if self.n == self.env_args.get("gate_at"):
            reached, opened = gate(self.env_args["gate"])
            reached.set()
            await asyncio.to_thread(opened.wait, 120)
        done_at = self.env_args.get("done_at")
        return StepOutcome(message=self._message(), done=done_at is not None and self.n >= done_at)

    def score(self, transcript: Transcript) -> ScoreResult:
        return ScoreResult(reward=1.0, details={"turns": len(transcript.turns)})

    def _message(self) -> str:
        return f"m{self.n}" + "x" * self.env_args.get("pad", 0)


ENDLESS = f"{__name__}:Endless"


class Faulty(Environment):
    """Raises from its own code: `on: reset`, or `on: step` at step `at` (0-based), or
    `on: score_raise`; with `on: score` its score() hangs for `hang_s` (default 20)."""

    def reset(self, task: Task) -> Any:
        if self.env_args.get("on") == "reset":
            raise KeyError("reset-canary")
        self.n = 0
        return "m0"

    def step(self, reply: Any) -> StepOutcome:
        if self.env_args.get("on", "step") == "step" and self.n == self.env_args.get("at", 1):
            raise ValueError(f"step-canary at {self.n}")
        self.n += 1
        return StepOutcome(message=f"m{self.n}")

    async def score(self, transcript: Transcript) -> ScoreResult:
        if self.env_args.get("on") == "score":
            await asyncio.sleep(self.env_args.get("hang_s", 20))
        if self.env_args.get("on") == "score_raise":
            raise ValueError("score-canary")
        return ScoreResult(reward=0.5, details={"turns": len(transcript.turns)})


FAULTY = f"{__name__}:Faulty"


class Forgiving(Environment):
    """Takes a harness's `error` for a turn in its stride (`step_error`): the next
    message names the failed turn, and the episode goes on. Done after `done_at` turns
    (default 4), errors included; the score's details list the turns that failed.
    env_args: `give_up`: decline every error (`step_error` returns None)."""

    def reset(self, task: Task) -> Any:
        self.n = 0
        self.failed: list[int] = []
        return "m0"

    def step(self, reply: Any) -> StepOutcome:
        self.n += 1
        return StepOutcome(message=f"m{self.n}", done=self.n >= self.env_args.get("done_at", 4))

    def step_error(self, error: Any) -> StepOutcome | None:
        if self.env_args.get("give_up"):
            return None
        self.n += 1
        self.failed.append(error.turn)
        done = self.n >= self.env_args.get("done_at", 4)
        return StepOutcome(message=f"after the error in turn {error.turn}", done=done)

    def score(self, transcript: Transcript) -> ScoreResult:
        errors = [t.turn for t in transcript.turns if t.error_type == "harness_error"]
        stepped = getattr(self, "failed", None)  # a fresh instance (worker lost): never reset
        return ScoreResult(reward=1.0, details={"stepped_errors": stepped, "errors": errors})


FORGIVING = f"{__name__}:Forgiving"


class Toolbox(Environment):
    """Tools for the bridge's error path: `explode` raises, `note` records a note.
    Done when the agent says "done"; reward 1.0 once a note was taken."""

    def __init__(self, **env_args: Any) -> None:
        super().__init__(**env_args)
        self.notes: list[str] = []

    def tools(self):
        def explode(why: str) -> str:
            """Fail on purpose."""
            raise RuntimeError(f"exploded: {why}")

        def note(text: str) -> str:
            """Take a note."""
            self.notes.append(text)
            return "noted"

        return [explode, note]

    def reset(self, task: Task) -> Any:
        return "use the tools, then say done"

    def step(self, reply: Any) -> StepOutcome:
        return StepOutcome(done=str(reply).strip().lower() == "done")

    def score(self, transcript: Transcript) -> ScoreResult:
        return ScoreResult(reward=1.0 if self.notes else 0.0, details={"notes": self.notes})


from episodes.envs.script import ScriptEnv  # noqa: E402  (after the test envs above)


class ScriptedToolbox(ScriptEnv):
    """The `script` env with a `put` tool (ACP agents calling tools over the bridge)."""

    def __init__(self, **env_args: Any) -> None:
        super().__init__()
        self.store: dict[str, str] = {}

    def tools(self):
        def put(key: str, value: str) -> str:
            """Store a value under a key."""
            self.store[key] = value
            return f"stored {key!r}"

        return [put]


class ForgivingScript(ScriptEnv):
    """The `script` env that takes a failed turn as a reply it cannot use (None) and
    sends the next scripted message (`step_error`)."""

    def step_error(self, error: Any) -> StepOutcome:
        return self.step(None)


FORGIVING_SCRIPT = f"{__name__}:ForgivingScript"


class BoxWork(Environment):
    """Grades work done in the box: reset writes `task.txt` there; the harness's reply is
    a shell command the env runs in the box (as an agent would have); score reads
    `out.txt` back. env_args: `gone_at_score` stops the box first (the box is gone);
    `slow_score` runs a command that outlives `score_timeout_s`."""

    def reset(self, task: Task) -> Any:
        self._text = task.data.get("text", "hello box")
        return self._written()

    async def _written(self) -> str:
        await self.box.write_file("task.txt", self._text)
        return "tr a-z A-Z < task.txt > out.txt"

    async def step(self, reply: Any) -> StepOutcome:
        r = await self.box.run(str(reply))
        return StepOutcome(done=True, reward=float(r.ok))

    async def score(self, transcript: Transcript) -> ScoreResult:
        if self.env_args.get("gone_at_score"):
            await self.box.runtime.stop()
        if self.env_args.get("slow_score"):
            r = await self.box.run(["sleep", "600"], timeout_s=600)
            return ScoreResult(reward=0.0, details={"timed_out": r.timed_out})
        out = (await self.box.read_file("out.txt")).decode()
        return ScoreResult(reward=float(out == self._text.upper()), details={"out": out})


BOX_WORK = f"{__name__}:BoxWork"


# -- sync env code off the loop (issue 19) ---------------------------------------------

# name -> (score started, open): the in-process worker and the test share this module.
GATES: dict[str, tuple[threading.Event, threading.Event]] = {}


def gate(name: str) -> tuple[threading.Event, threading.Event]:
    return GATES.setdefault(name, (threading.Event(), threading.Event()))


class GatedScore(Environment):
    """Done after one turn. Its sync score() blocks the way a rubric running a
    subprocess does, until the test opens the gate named `gate` (or `max_s` passes),
    and reports whether the gate opened it (`opened`). Counts its scores (`SCORES`)."""

    def reset(self, task: Task) -> Any:
        return "m0"

    def step(self, reply: Any) -> StepOutcome:
        return StepOutcome(done=True)

    def score(self, transcript: Transcript) -> ScoreResult:
        SCORES[self.env_args["gate"]] = SCORES.get(self.env_args["gate"], 0) + 1
        started, opened = gate(self.env_args["gate"])
        started.set()
        was_opened = opened.wait(self.env_args.get("max_s", 120))
        return ScoreResult(reward=1.0, details={"opened": was_opened})


GATED_SCORE = f"{__name__}:GatedScore"
SCORES: dict[str, int] = {}
