"""Whole episodes of the built-in envs over real harness processes, in-process (no Temporal).

Each episode spawns `{python} -m episodes.harness.reference.<name>` through the subprocess
runtime. The point being tested is that one live process serves every turn: the
guesser's narrowed range and the REPL's namespace exist nowhere else.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import psutil
import pytest

from episodes.envs.script import ScriptEnv
from episodes.local import run_episode_local
from episodes.session.live import LiveSession
from episodes.specfile import load_spec
from episodes.types.results import StepOutcome
from episodes.types.runtime import SubprocessConfig
from episodes.types.spec import EpisodeSpec, parse_spec

pytestmark = pytest.mark.timeout(120)

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def spec(env: str, harness: str, tasks: list[dict], **extra: Any) -> EpisodeSpec:
    return parse_spec(
        {
            "name": f"test-{env}",
            "env": env,
            "tasks": tasks,
            "harness": {"command": f"{{python}} -m episodes.harness.reference.{harness}"},
            "turn_timeout_s": 30,
            **extra,
        }
    )


def harness_children(module: str) -> list[psutil.Process]:
    """Live processes below this test process running `python -m <module>...`."""
    found = []
    for p in psutil.Process().children(recursive=True):
        try:
            argv = p.cmdline()
            if any(a.startswith(module) for a in argv) and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except psutil.NoSuchProcess:
            pass
    return found


def assert_gone(pid: int) -> None:
    try:
        status = psutil.Process(pid).status()
    except psutil.NoSuchProcess:
        return
    raise AssertionError(f"harness pid {pid} still exists after the episode (status {status})")


# -- guess-number + guesser ---------------------------------------------------------

# Bisection over 1..100 by hand: mid = (lo + hi) // 2, then lo = g + 1 or hi = g - 1.
BISECTIONS = {
    50: [50],
    75: [50, 75],
    42: [50, 25, 37, 43, 40, 41, 42],
    1: [50, 25, 12, 6, 3, 1],
    100: [50, 75, 88, 94, 97, 99, 100],
}


async def test_guesser_finds_each_secret_with_the_expected_reward():
    s = spec(
        "guess-number",
        "guesser",
        [{"id": f"s{n}", "data": {"secret": n}} for n in BISECTIONS],
        env_args={"budget": 10},
    )
    results = await asyncio.gather(*(run_episode_local(s, t) for t in s.load_tasks()))
    for task, result in zip(s.load_tasks(), results, strict=True):
        guesses = BISECTIONS[task.data["secret"]]
        assert result.termination == "env_done", result.error
        assert result.turns == len(guesses)
        assert result.score_details["guesses"] == guesses
        # 1 - (turns - 1) / budget
        assert result.reward == pytest.approx(1 - (len(guesses) - 1) / 10)


async def test_guesser_with_a_derived_secret_and_a_budget_too_small_to_bisect():
    s = spec(
        "guess-number",
        "guesser",
        [{"id": "derived"}, {"id": "wide", "data": {"high": 1000, "secret": 999, "budget": 3}}],
    )
    derived, wide = [await run_episode_local(s, t) for t in s.load_tasks()]
    assert derived.termination == "env_done" and derived.score_details["found"]
    assert derived.score_details["guesses"][-1] == derived.score_details["secret"]
    assert derived.reward == pytest.approx(1 - (derived.turns - 1) / 10)
    # 500, 750, 875: the budget runs out before 999.
    assert wide.termination == "env_done"
    assert wide.score_details["guesses"] == [500, 750, 875]
    assert wide.reward == 0.0


async def test_one_guesser_process_serves_every_turn_and_is_gone_after_close():
    s = spec("guess-number", "guesser", [{"id": "g", "data": {"secret": 42}}])
    session = LiveSession(s, s.load_tasks()[0], 0, "test-guesser-pid")
    pids: set[int] = set()
    events: list[Any] = []
    try:
        assert await session.open() == {"low": 1, "high": 100, "budget": 10, "feedback": None}
        for n in range(s.max_turns):
            pids.update(p.pid for p in harness_children("episodes.harness.reference.guesser"))
            result = await session.turn(n, on_event=events.append)
            # The reasoning event streams before the reply and names the same guess.
            assert [e["guess"] for e in result.record.events] == [result.record.reply]
            if result.observation.done:
                break
        assert result.termination == "env_done" and n + 1 == len(BISECTIONS[42])
        assert (await session.score()).reward == pytest.approx(0.4)
    finally:
        await session.close()
    assert [e["guess"] for e in events] == BISECTIONS[42]
    assert len(pids) == 1, f"expected one harness process across turns, saw {pids}"
    assert_gone(pids.pop())
    await session.close()  # idempotent


# -- python-repl + repl -------------------------------------------------------------


async def test_repl_state_defined_in_turn_one_is_used_in_turn_three():
    s = spec(
        "python-repl",
        "repl",
        [
            {
                "id": "state",
                "data": {
                    "snippets": ["import os; pid = os.getpid(); x = 20", "y = x + 1", "x * y"],
                    "expected": ["", "", "420"],
                },
            },
            {
                "id": "same-process",
                "data": {
                    "snippets": ["import os; first = os.getpid()", "1 + 1", "os.getpid() == first"],
                    "expected": ["", "2", "True"],
                },
            },
        ],
    )
    for task in s.load_tasks():
        result = await run_episode_local(s, task)
        assert result.termination == "env_done", result.error
        assert result.score_details["matches"] == [True, True, True]
        assert result.reward == 1.0


async def test_repl_reports_a_traceback_as_the_reply_and_keeps_its_namespace():
    snippets = ["def f(d):\n    return 1 / d", "f(0)", "print(f(4))", "1 +"]
    s = spec("python-repl", "repl", [{"id": "errors", "data": {"snippets": snippets}}])
    session = LiveSession(s, s.load_tasks()[0], 0, "test-repl-errors")
    try:
        await session.open()
        replies = [(await session.turn(n)).record.reply for n in range(len(snippets))]
    finally:
        await session.close()
    assert replies[0] == ""
    assert replies[1].startswith("Traceback (most recent call last):\n")
    assert 'File "<turn 1>", line 1' in replies[1] and 'File "<turn 0>", line 2, in f' in replies[1]
    assert replies[1].endswith("ZeroDivisionError: division by zero\n")
    assert replies[2] == "0.25\n"
    assert replies[3].endswith("SyntaxError: invalid syntax\n")


class PidProbeEnv(ScriptEnv):
    """A user env (loaded by `module:Class`) that keeps the replies where the test sees them."""

    replies: list[Any] = []

    def step(self, reply: Any) -> StepOutcome:
        PidProbeEnv.replies.append(reply)
        return super().step(reply)


async def test_harness_process_is_gone_after_a_local_episode():
    PidProbeEnv.replies.clear()
    s = spec(
        f"{__name__}:PidProbeEnv",
        "repl",
        [{"id": "pid", "data": {"messages": ["import os; os.getpid()"]}}],
    )
    # The host pid is what is checked: a sandboxed harness reports its box's pid instead
    # (the sandbox's own cleanup: tests/episodes/runtimes/test_containment.py, the runtime contract).
    # PYTHONPATH: unsandboxed, `-m episodes...` finds the package the way the worker does.
    trusted = s.harness.model_copy(
        update={"runtime": SubprocessConfig(isolation="none"), "inherit_env": ["PYTHONPATH"]}
    )
    s = s.model_copy(update={"harness": trusted})
    result = await run_episode_local(s, s.load_tasks()[0])
    assert result.termination == "env_done", result.error
    (reply,) = PidProbeEnv.replies
    assert_gone(int(reply))


# -- script + echo ------------------------------------------------------------------


async def test_script_with_echo_scores_the_fraction_of_expected_replies():
    s = spec(
        "script",
        "echo",
        [
            {
                "id": "two-of-three",
                "data": {"messages": ["a", {"b": [1, 2]}, 3], "expected": ["a", {"b": [1]}, 3]},
            }
        ],
    )
    result = await run_episode_local(s, s.load_tasks()[0])
    assert result.termination == "env_done" and result.turns == 3
    assert result.score_details["matches"] == [True, False, True]
    assert result.reward == pytest.approx(2 / 3)


# -- the examples, end to end --------------------------------------------------------

EXAMPLE_REWARDS = {
    "script.yaml": {"hello": 1.0, "json-values": 1.0, "half-right": 0.5, "unscored": None},
    "python-repl.yaml": {"arithmetic": 1.0, "functions": 1.0, "imports-and-exceptions": 1.0},
}


@pytest.mark.parametrize("name", ["script.yaml", "python-repl.yaml", "guess-number.yaml"])
async def test_example_specs_run_to_the_expected_rewards(name):
    s = load_spec(EXAMPLES / name)
    tasks = s.load_tasks()
    results = await asyncio.gather(*(run_episode_local(s, t) for t in tasks))
    for task, result in zip(tasks, results, strict=True):
        assert result.termination == "env_done", (task.id, result.error)
        if name == "guess-number.yaml":
            assert result.score_details["found"], task.id
            assert result.reward == pytest.approx(1 - (result.turns - 1) / 10)
        else:
            assert result.reward == EXAMPLE_REWARDS[name][task.id], task.id
    if name == "guess-number.yaml":
        assert {r.task_id: r.reward for r in results}["first-try"] == 1.0
    assert harness_children("episodes.harness.reference") == []
