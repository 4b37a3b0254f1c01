"""`episodes serve-openenv`'s server against OpenEnv's own client (`GenericEnvClient`,
what TRL's and torchforge's environment clients are built on), a real dev server and
worker: each OpenEnv session a durable interactive episode, its turns counted where the
harness receives them."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("openenv")

import httpx
import websockets
from openenv.core import GenericEnvClient

from episodes.integrations.openenv.client import EpisodeEnvClient
from episodes.integrations.openenv.env import EpisodeAction, EpisodeObservation
from tests.episodes.integrations.openenv.sessions import (
    MESSAGES,
    by_harness,
    logging_spec,
    openenv_server,
    progress,
)
from tests.support.helpers import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
QUEUE = "episodes-test"  # the session worker's (tests/conftest.py)


def openenv_client(url: str) -> GenericEnvClient:
    return GenericEnvClient(base_url=url, connect_timeout_s=60, message_timeout_s=180)


async def test_a_multi_turn_task_runs_to_its_end_and_is_scored(client, worker, tmp_path):
    spec = logging_spec(tmp_path)
    async with openenv_server(client, QUEUE, spec) as url:
        async with openenv_client(url) as env:
            first = await env.reset(task_id="p")
            obs = first.observation
            assert (obs["message"], obs["turn"], first.done) == ("p:0", None, False)
            workflow_id = obs["workflow_id"]
            assert workflow_id == f"{spec.name}-b.p.s0.session"
            state = await env.state()
            assert (state["episode_id"], state["step_count"]) == (workflow_id, 0)
            for i, message in enumerate(MESSAGES):
                result = await env.step({"message": obs["message"]})
                obs = result.observation
                assert (obs["turn"], obs["reply"], obs["workflow_id"]) == (i, message, workflow_id)
                assert result.done == (i == len(MESSAGES) - 1)
            assert obs["termination"] == "env_done" and obs["message"] is None
            assert result.reward == 1.0  # the scored episode's
            assert (await env.state())["step_count"] == len(MESSAGES)
            # Re-attaching to it now: over, with its result; nothing runs again.
            ended = await env.reset(episode_id=workflow_id)
            assert (ended.done, ended.reward, ended.observation["turn"]) == (True, 1.0, 3)
            assert ended.observation["termination"] == "env_done"

    episode = await client.get_workflow_handle(workflow_id).result()
    assert (episode["termination"], episode["reward"], episode["turns"]) == ("env_done", 1.0, 4)
    assert by_harness(tmp_path) == [MESSAGES]  # each turn delivered once


async def test_the_typed_client_carries_the_same_session(client, worker, tmp_path):
    spec = logging_spec(tmp_path)
    async with openenv_server(client, QUEUE, spec) as url:
        async with EpisodeEnvClient(base_url=url, message_timeout_s=180) as env:
            result = await env.reset(task_id="p")
            assert isinstance(result.observation, EpisodeObservation)
            while not result.done:
                action = EpisodeAction(message=result.observation.message)
                result = await env.step(action)
            obs = result.observation
            assert (obs.turn, obs.termination, result.reward) == (3, "env_done", 1.0)
            state = await env.state()
            assert (state.episode_id, state.step_count) == (obs.workflow_id, 4)
    assert by_harness(tmp_path) == [MESSAGES]


async def test_a_closed_connection_ends_the_session_and_scores_it(client, worker, tmp_path):
    spec = logging_spec(tmp_path)
    async with openenv_server(client, QUEUE, spec) as url:
        env = openenv_client(url)
        workflow_id = (await env.reset()).observation["workflow_id"]
        await env.step({"message": "p:0"})
        await env.close()  # OpenEnv's `close` message, then the closing handshake

        episode = await client.get_workflow_handle(workflow_id).result()
    assert (episode["termination"], episode["turns"], episode["reward"]) == ("closed", 1, 0.25)
    assert by_harness(tmp_path) == [["p:0"]]


async def test_a_reset_ends_the_connections_session_before_and_a_normal_closure_ends_its_own(
    client, worker, tmp_path
):
    spec = logging_spec(tmp_path)
    async with openenv_server(client, QUEUE, spec) as url:
        async with openenv_client(url) as env:
            before = (await env.reset(task_id="p")).observation["workflow_id"]
            await env.step({"message": "p:0"})
            after = (await env.reset(task_id="p")).observation["workflow_id"]
            assert after != before
            episode = await client.get_workflow_handle(before).result()
            assert (episode["termination"], episode["turns"]) == ("closed", 1)

        # A client that closes the socket itself (1000) without OpenEnv's close message.
        async with websockets.connect(url.replace("http", "ws") + "/ws") as ws:
            await ws.send(json.dumps({"type": "reset", "data": {"task_id": "p"}}))
            own = json.loads(await ws.recv())["data"]["observation"]["workflow_id"]
        episode = await client.get_workflow_handle(own).result()
        assert (episode["termination"], episode["turns"]) == ("closed", 0)


async def test_a_dropped_connection_parks_and_the_client_goes_on_where_it_was(
    client, worker, tmp_path
):
    spec = logging_spec(tmp_path)
    async with openenv_server(client, QUEUE, spec) as url:
        env = openenv_client(url)
        workflow_id = (await env.reset(task_id="p")).observation["workflow_id"]
        for message in MESSAGES[:2]:
            await env.step({"message": message})
        assert env._ws is not None
        env._ws.transport.abort()  # the trainer's process gone: no closing handshake

        async def parked() -> bool:
            return (await progress(client, workflow_id)).status == "parked"

        assert await wait_until(parked, timeout=120), await progress(client, workflow_id)

        async with openenv_client(url) as again:
            back = await again.reset(episode_id=workflow_id)
            obs = back.observation
            # Where it was: the last step taken and the env message after it.
            assert (obs["turn"], obs["message"], back.done) == (1, "p:2", False)
            assert (await progress(client, workflow_id)).status == "parked"  # nothing ran
            for i in (2, 3):
                result = await again.step({"message": obs["message"]})
                obs = result.observation
                assert (obs["turn"], obs["reply"]) == (i, MESSAGES[i])
            assert result.done and result.reward == 1.0

    episode = await client.get_workflow_handle(workflow_id).result()
    assert (episode["termination"], episode["turns"], episode["turns_replayed"]) == (
        "env_done",
        4,
        2,
    )
    # The first harness had turns 0-1; the one the resume started got them replayed, then
    # turns 2-3: each of the trainer's turns reached a harness as a new turn once.
    assert by_harness(tmp_path) == [MESSAGES[:2], MESSAGES]


async def test_a_retried_step_answers_its_recorded_reply_and_delivers_nothing(
    client, worker, tmp_path
):
    spec = logging_spec(tmp_path)
    async with openenv_server(client, QUEUE, spec) as url:
        async with openenv_client(url) as env:
            await env.reset(task_id="p")
            first = await env.step({"message": "p:0", "metadata": {"turn": 0}})
            again = await env.step({"message": "p:0", "metadata": {"turn": 0}})
            assert again.observation == first.observation
            with pytest.raises(RuntimeError, match="metadata turn 5: the next step is 1"):
                await env.step({"message": "p:1", "metadata": {"turn": 5}})
            await env.step({"message": "p:1", "metadata": {"turn": 1}})
    assert by_harness(tmp_path) == [["p:0", "p:1"]]


async def test_refusals_are_one_line_errors(client, worker, tmp_path):
    spec = logging_spec(tmp_path)
    async with openenv_server(client, QUEUE, spec) as url:
        async with openenv_client(url) as env:
            with pytest.raises(RuntimeError, match="step before reset: reset"):
                await env.step({"message": "p:0"})
            with pytest.raises(RuntimeError, match="no task 'nope' in spec"):
                await env.reset(task_id="nope")
            # An episode_id no workflow has names a new session.
            named = f"{spec.name}-named"
            obs = (await env.reset(episode_id=named)).observation
            assert (obs["workflow_id"], obs["message"], obs["turn"]) == (named, "p:0", None)


async def test_the_stateless_http_routes_step_a_session_named_by_its_episode_id(
    client, worker, tmp_path
):
    spec = logging_spec(tmp_path)
    async with openenv_server(client, QUEUE, spec) as url:
        async with httpx.AsyncClient(base_url=url, timeout=180) as http:
            refused = await http.post("/step", json={"action": {"message": "p:0"}})
            assert refused.status_code == 400
            assert refused.json()["detail"].startswith("step before reset: reset()")
            reset = (await http.post("/reset", json={"task_id": "p"})).json()
            workflow_id = reset["observation"]["workflow_id"]
            assert reset["observation"]["message"] == "p:0"
            for i, message in enumerate(MESSAGES):
                body = {"action": {"message": message}, "episode_id": workflow_id}
                step = (await http.post("/step", json=body)).json()
                assert step["observation"]["turn"] == i
            assert step["done"] and step["reward"] == 1.0
    assert by_harness(tmp_path) == [MESSAGES]
