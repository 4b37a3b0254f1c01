"""Built-in envs driven directly with scripted replies, and the env loader's errors."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from hypothesis import given
from hypothesis import strategies as st

from episodes.envs import BUILTINS, Environment, check_env_ref, load_env
from episodes.envs.guess_number import GuessNumberEnv, derive_secret
from episodes.envs.python_repl import PythonReplEnv
from episodes.envs.script import ScriptEnv
from episodes.errors import EnvironmentLoadError
from episodes.types.results import Task, Transcript, TurnRecord


def play(env: Environment, task: Task, replies: list) -> tuple[list, list]:
    """Drive an env like a session would: (messages sent, step outcomes)."""
    sent = [env.reset(task)]
    outcomes = []
    for reply in replies:
        out = env.step(reply)
        outcomes.append(out)
        if out.done:
            break
        sent.append(out.message)
    return sent, outcomes


def transcript(task: Task, replies: list, *, errors: dict[int, str] | None = None) -> Transcript:
    errors = errors or {}
    turns = [
        TurnRecord(turn=i, reply=None if i in errors else r, error=errors.get(i))
        for i, r in enumerate(replies)
    ]
    return Transcript(task=task, turns=turns)


# -- script -----------------------------------------------------------------------


def test_script_sends_messages_in_order_and_is_done_after_the_last_reply():
    task = Task(id="t", data={"messages": ["one", {"two": 2}, [3]]})
    sent, outcomes = play(ScriptEnv(), task, ["r1", "r2", "r3"])
    assert sent == ["one", {"two": 2}, [3]]
    assert [o.done for o in outcomes] == [False, False, True]
    # Without `expected` there is nothing to score against.
    assert outcomes[-1].reward is None
    score = ScriptEnv().score(transcript(task, ["r1", "r2", "r3"]))
    assert score.reward is None
    assert "matches" not in score.details


def test_script_reward_is_the_fraction_of_replies_equal_to_expected():
    task = Task(id="t", data={"messages": ["a", "b", "c"], "expected": ["a", "B", {"c": 1}]})
    _, outcomes = play(ScriptEnv(), task, ["a", "b", {"c": 1}])
    assert outcomes[-1].done and outcomes[-1].reward == pytest.approx(2 / 3)
    score = ScriptEnv().score(transcript(task, ["a", "b", {"c": 1}]))
    assert score.reward == pytest.approx(2 / 3)
    assert score.details["matches"] == [True, False, True]


def test_script_score_counts_missing_and_errored_turns_as_misses():
    task = Task(id="t", data={"messages": ["a", "b", "c", "d"], "expected": ["a", "b", "c", "d"]})
    # The harness answered turn 0, then reported an error on turn 1 and the episode ended.
    score = ScriptEnv().score(transcript(task, ["a", "b"], errors={1: "boom"}))
    assert score.reward == 0.25
    assert score.details["matches"] == [True, False, False, False]
    assert ScriptEnv().score(Transcript(task=task)).reward == 0.0


def test_script_rejects_bad_task_data_naming_the_task():
    with pytest.raises(ValueError, match=r"task 'bad'.*data\.messages"):
        ScriptEnv().reset(Task(id="bad", data={}))
    with pytest.raises(ValueError, match=r"task 'bad'.*data\.expected"):
        ScriptEnv().reset(Task(id="bad", data={"messages": ["a", "b"], "expected": ["a"]}))


def test_script_refuses_steps_after_done():
    env = ScriptEnv()
    play(env, Task(id="t", data={"messages": ["only"]}), ["x"])
    with pytest.raises(RuntimeError):
        env.step("again")


# -- guess-number -----------------------------------------------------------------


def test_guess_number_bisection_game_and_reward_formula():
    env = GuessNumberEnv()
    task = Task(id="g", data={"secret": 42})
    sent, outcomes = play(env, task, [50, 25, 37, 43, 40, 42])
    assert sent[0] == {"low": 1, "high": 100, "budget": 10, "feedback": None}
    assert [m["feedback"] for m in sent[1:]] == ["lower", "higher", "higher", "lower", "higher"]
    assert [m["turns_left"] for m in sent[1:]] == [9, 8, 7, 6, 5]
    assert outcomes[-1].done
    # Found on turn 6 of 10: 1 - 5/10.
    assert outcomes[-1].reward == pytest.approx(0.5)
    score = GuessNumberEnv().score(transcript(task, [50, 25, 37, 43, 40, 42]))
    assert score.reward == pytest.approx(0.5)
    assert score.details["found"] is True and score.details["turns_used"] == 6
    assert score.details["secret"] == 42


def test_guess_number_first_and_last_turn_rewards():
    task = Task(id="g", data={"secret": 7, "budget": 4})
    _, outcomes = play(GuessNumberEnv(), task, [7])
    assert outcomes[-1].done and outcomes[-1].reward == 1.0
    _, outcomes = play(GuessNumberEnv(), task, [1, 2, 3, 7])
    assert outcomes[-1].done and outcomes[-1].reward == pytest.approx(0.25)


def test_guess_number_invalid_guesses_waste_turns_until_the_budget_is_spent():
    task = Task(id="g", data={"secret": 5, "budget": 5})
    replies = ["five", True, 5.0, None, {"guess": 5}]
    sent, outcomes = play(GuessNumberEnv(), task, replies)
    assert [m["feedback"] for m in sent[1:]] == ["invalid"] * 4
    assert len(outcomes) == 5 and outcomes[-1].done and outcomes[-1].reward == 0.0
    score = GuessNumberEnv().score(transcript(task, replies))
    assert score.reward == 0.0
    assert score.details["invalid"] == 5 and score.details["found"] is False


def test_guess_number_budget_spent_without_finding_scores_zero():
    task = Task(id="g", data={"secret": 99, "budget": 3})
    _, outcomes = play(GuessNumberEnv(), task, [1, 2, 3, 99])
    assert [o.done for o in outcomes] == [False, False, True]
    assert outcomes[-1].reward == 0.0
    # A transcript longer than the budget does not sneak in a late find.
    assert GuessNumberEnv().score(transcript(task, [1, 2, 3, 99])).reward == 0.0


def test_guess_number_task_data_overrides_env_args():
    env = load_env("guess-number", {"low": 10, "high": 20, "budget": 3})
    assert env.reset(Task(id="a")) == {"low": 10, "high": 20, "budget": 3, "feedback": None}
    first = env.reset(Task(id="b", data={"low": 0, "high": 1000, "budget": 12}))
    assert first == {"low": 0, "high": 1000, "budget": 12, "feedback": None}
    with pytest.raises(ValueError, match=r"task 'c'.*secret must be an integer in \[10, 20\]"):
        env.reset(Task(id="c", data={"secret": 99}))


def test_guess_number_secret_is_derived_from_the_task_id_not_from_hash():
    task = Task(id="some-task")
    secret = GuessNumberEnv().settings(task)[2]
    assert 1 <= secret <= 100
    assert GuessNumberEnv().settings(task)[2] == secret
    # Python's str hash() differs per process; the derived secret must not.
    code = (
        "from episodes.envs.guess_number import derive_secret as d; print(d('some-task', 1, 100))"
    )
    for seed in ("1", "2"):
        out = subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        )
        assert int(out.stdout) == secret
    # Different ids spread over the range rather than collapsing to one value.
    assert len({derive_secret(f"task-{i}", 1, 100) for i in range(50)}) > 20


@given(st.text(max_size=30), st.integers(-1000, 1000), st.integers(0, 1000))
def test_derived_secret_is_always_in_range(task_id, low, width):
    assert low <= derive_secret(task_id, low, low + width) <= low + width


# -- python-repl ------------------------------------------------------------------


def test_python_repl_sends_snippets_and_matches_output_ignoring_trailing_whitespace():
    task = Task(
        id="r",
        data={"snippets": ["x = 2", "print(x)", "x * 21", "y"], "expected": ["", "2", "42", "7"]},
    )
    replies = ["", "2\n", "42  \n\n", "NameError: name 'y' is not defined\n"]
    sent, outcomes = play(PythonReplEnv(), task, replies)
    assert sent == ["x = 2", "print(x)", "x * 21", "y"]
    assert outcomes[-1].done and outcomes[-1].reward == 0.75
    score = PythonReplEnv().score(transcript(task, replies))
    assert score.details["matches"] == [True, True, True, False]


def test_python_repl_non_string_reply_is_a_miss_and_snippets_must_be_strings():
    task = Task(id="r", data={"snippets": ["1 + 1"], "expected": ["2"]})
    assert PythonReplEnv().score(transcript(task, [2])).reward == 0.0
    with pytest.raises(ValueError, match=r"task 'r'.*data\.snippets\[1\] must be a string"):
        PythonReplEnv().reset(Task(id="r", data={"snippets": ["ok", 3]}))


# -- loader -----------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_builtins_load_as_fresh_instances(name):
    check_env_ref(name)
    a, b = load_env(name, {}), load_env(name, {})
    assert isinstance(a, Environment) and a.name == name
    assert a is not b


def test_unknown_builtin_lists_the_builtins():
    with pytest.raises(EnvironmentLoadError) as e:
        check_env_ref("guess-numbers")
    msg = str(e.value)
    assert "'guess-numbers'" in msg and "\n" not in msg
    for name in BUILTINS:
        assert name in msg


@pytest.mark.parametrize(
    ("ref", "needle"),
    [
        ("no_such_pkg_xyz.envs:MyEnv", "cannot import module 'no_such_pkg_xyz.envs'"),
        ("episodes.envs.script:NoSuchEnv", "has no attribute 'NoSuchEnv'"),
        ("episodes.models:Task", "'Task' is not a subclass of episodes.envs.base.Environment"),
        ("episodes.envs.base:call", "'call' is not a subclass"),
        ("a:b:c", "expected 'package.module:Class'"),
        (":Env", "expected 'package.module:Class'"),
        ("episodes.envs.script:", "expected 'package.module:Class'"),
    ],
)
def test_bad_refs_raise_one_line_naming_the_ref(ref, needle):
    for fn in (check_env_ref, lambda r: load_env(r, {})):
        with pytest.raises(EnvironmentLoadError) as e:
            fn(ref)
        assert f"env {ref!r}" in str(e.value)
        assert needle in str(e.value)
        assert "\n" not in str(e.value)


def test_bad_env_args_name_the_env_and_the_argument():
    with pytest.raises(EnvironmentLoadError, match=r"env 'script': bad env_args: .*'colour'"):
        load_env("script", {"colour": "red"})
    with pytest.raises(EnvironmentLoadError, match=r"env 'guess-number': bad env_args: .*budget"):
        load_env("guess-number", {"budget": 0})
    with pytest.raises(EnvironmentLoadError, match=r"env 'guess-number': bad env_args: .*low"):
        load_env("guess-number", {"low": 10, "high": 1})


@pytest.fixture
def user_envs(tmp_path, monkeypatch):
    """A user package of envs on sys.path, as a trainer would ship one."""
    (tmp_path / "my_envs.py").write_text(
        textwrap.dedent(
            """
            from episodes.envs.base import Environment
            from episodes.models import StepOutcome

            CREATED = []

            class Counter(Environment):
                def __init__(self, *, start=0):
                    super().__init__(start=start)
                    self.start = start
                    CREATED.append(self)

                def reset(self, task):
                    return self.start

                def step(self, reply):
                    return StepOutcome(message=reply + 1, done=reply >= 3)
            """
        )
    )
    (tmp_path / "broken_envs.py").write_text("raise RuntimeError('no database configured')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for mod in ("my_envs", "broken_envs"):
        sys.modules.pop(mod, None)


def test_user_env_ref_loads_with_env_args_and_check_does_not_instantiate(user_envs):
    check_env_ref("my_envs:Counter")
    import my_envs

    assert my_envs.CREATED == []
    env = load_env("my_envs:Counter", {"start": 2})
    assert my_envs.CREATED == [env]
    assert env.reset(Task(id="t")) == 2
    assert env.step(3).done


def test_user_env_module_that_fails_to_import_reports_its_error(user_envs):
    with pytest.raises(EnvironmentLoadError) as e:
        check_env_ref("broken_envs:Env")
    assert str(e.value) == (
        "env 'broken_envs:Env': importing module 'broken_envs' failed: "
        "RuntimeError: no database configured"
    )
