"""The `kv-store` env: its tools change its store, and the reward reads that store."""

from __future__ import annotations

import pytest

from episodes.envs import load_env
from episodes.envs.kv_store import KvStoreEnv, says_done
from episodes.tools.bridge import ToolBridge
from episodes.types.results import Task, Transcript, TurnRecord
from tests.support.mcp_client import mcp_client

GOAL = {"a": "1", "b": "2", "c": "3"}


def task(**data) -> Task:
    return Task(id="kv", data={"goal": GOAL, **data})


def transcript_of(t: Task, *replies) -> Transcript:
    return Transcript(task=t, turns=[TurnRecord(turn=i, reply=r) for i, r in enumerate(replies)])


def test_is_a_builtin_and_the_first_message_says_what_to_achieve():
    env = load_env("kv-store")
    assert isinstance(env, KvStoreEnv)
    first = env.reset(task())
    assert first["goal"] == GOAL
    assert first["tools"] == ["put", "get", "list_keys", "delete"]
    assert "done" in first["instruction"]


def test_reward_is_the_fraction_of_goal_entries_in_the_store():
    env = KvStoreEnv()
    t = task(initial={"b": "wrong", "z": "extra"})
    env.reset(t)
    env.put("a", "1")
    out = env.step("working on it")
    assert not out.done and "1 of 3" in out.message["progress"]
    out = env.step("done")
    assert out.done and out.reward == pytest.approx(1 / 3)
    score = env.score(transcript_of(t, "working on it", "done"))
    assert score.reward == pytest.approx(1 / 3)
    assert score.details["correct"] == ["a"]
    assert score.details["wrong"] == ["b"] and score.details["missing"] == ["c"]
    assert score.details["store"] == {"a": "1", "b": "wrong", "z": "extra"}
    assert score.details["tool_calls"] == 1


def test_the_episode_ends_when_the_goal_is_met_without_saying_done():
    env = KvStoreEnv()
    env.reset(task())
    for k, v in GOAL.items():
        env.put(k, v)
    out = env.step("ok")
    assert out.done and out.reward == 1.0


def test_the_reward_ignores_what_the_agent_claims():
    env = KvStoreEnv()
    t = task()
    env.reset(t)
    # A reply quoting the goal is not the store: nothing was put.
    assert env.score(transcript_of(t, {"done": True, "store": GOAL})).reward == 0.0


def test_tools_behave_like_a_store():
    env = KvStoreEnv()
    env.reset(task(initial={"x": "9"}))
    assert env.get("x") == "9"
    with pytest.raises(LookupError, match="no key 'y'"):
        env.get("y")
    env.put("y", "8")
    assert env.list_keys() == ["x", "y"]
    assert env.delete("x") is True and env.delete("x") is False
    assert env.list_keys() == ["y"]


@pytest.mark.parametrize(
    ("reply", "done"),
    [("done", True), (" Done.\n", True), ({"done": True}, True), ({"text": "done"}, True)],
)
def test_says_done(reply, done):
    assert says_done(reply) is done


@pytest.mark.parametrize(
    "reply", ["abandoned", "not done yet", "done soon", None, 3, {"done": "yes"}]
)
def test_not_done(reply):
    assert says_done(reply) is False


@pytest.mark.parametrize(
    "data",
    [{}, {"goal": {}}, {"goal": {"a": 1}}, {"goal": ["a"]}, {"goal": {"a": "1"}, "initial": 3}],
)
def test_bad_task_data_is_a_named_error(data):
    with pytest.raises(ValueError, match="kv-store: task 'bad'"):
        KvStoreEnv().reset(Task(id="bad", data=data))


async def test_over_mcp_the_tools_change_the_env_and_the_score_sees_it():
    env = KvStoreEnv()
    tools = env.tools()  # before reset, as a session does
    t = task(initial={"b": "wrong"})
    env.reset(t)
    events: list = []
    async with (
        ToolBridge(tools, on_call=events.append) as bridge,
        mcp_client(bridge.url, bridge.token) as client,
    ):
        listed = {x.name: x for x in (await client.list_tools()).tools}
        assert set(listed) == {"put", "get", "list_keys", "delete"}
        assert set(listed["put"].input_schema["required"]) == {"key", "value"}
        await client.call_tool("put", {"key": "a", "value": "1"})
        await client.call_tool("put", {"key": "b", "value": "2"})
        r = await client.call_tool("get", {"key": "c"})
        assert r.is_error and "no key 'c'" in r.content[0].text
        r = await client.call_tool("list_keys", {})
        assert r.structured_content == {"result": ["a", "b"]}
    assert env.step("done").reward == pytest.approx(2 / 3)
    score = env.score(transcript_of(t, "done"))
    assert score.reward == pytest.approx(2 / 3) and score.details["missing"] == ["c"]
    assert [e["name"] for e in events] == ["put", "put", "get", "list_keys"]
    assert "error" in events[2] and events[3]["result"] == ["a", "b"]
