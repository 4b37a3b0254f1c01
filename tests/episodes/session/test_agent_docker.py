"""An agent episode in a Docker box with `network: none`, on the real engine.

The box cannot reach the worker's loopback, so the tool bridge and the model proxy
are Unix sockets in the box's private channel directory, served on the box's own
loopback by the in-box relay. What must hold: the harness in the box lists and calls
the env's tools and the model through them, the box still has no network, and
nothing of the session (container, channel directory) outlives it.
"""

from __future__ import annotations

import subprocess

import pytest

from episodes.model.scripted.server import ScriptedUpstream, kv_policy
from episodes.session.live import LiveSession
from episodes.types.spec import parse_spec
from tests.episodes.session.test_agent_session import UPSTREAM_KEY, agent_spec
from tests.support.backends import docker as backend

pytestmark = [pytest.mark.docker, pytest.mark.timeout(180)]


@pytest.fixture(scope="module", autouse=True)
def _engine() -> None:
    reason = backend.agent_skip_reason()
    if reason:
        pytest.skip(reason)


async def test_kv_agent_in_a_box_without_network(monkeypatch):
    monkeypatch.setenv("EPISODES_TEST_UPSTREAM_KEY", UPSTREAM_KEY)
    async with ScriptedUpstream(policy=kv_policy, key=UPSTREAM_KEY) as upstream:
        data = agent_spec(upstream.base_url)
        data["harness"]["runtime"] = {"type": "docker", "image": backend.AGENT_IMAGE}
        data["harness"]["ready_timeout_s"] = 60
        spec = parse_spec(data)
        session = LiveSession(spec, spec.tasks[0], 0, "s-docker-agent", labels=backend.labels())
        try:
            await session.open()
            runtime = session.runtime
            info = backend.client().api.inspect_container(runtime.name)
            assert info["HostConfig"]["NetworkMode"] == "none"
            channel = runtime.channel_dir[0]
            assert channel.stat().st_mode & 0o077 == 0  # private to the worker's user
            env = session.services.harness_env
            assert env["EPISODES_MCP_URL"].startswith("http://127.0.0.1:")
            assert env["OPENAI_BASE_URL"].startswith("http://127.0.0.1:")
            result = await session.turn(0)
            score = await session.score("env_done")
        finally:
            await session.close()
    assert result.termination == "env_done", result.record.error
    assert session.env.store == {"a": "1", "b": "2"}
    assert score.reward == 1.0
    kinds = [e.get("kind") for e in result.record.events]
    assert kinds.count("tool_call") == 2 and kinds.count("model_call") == 3
    assert not channel.exists()
    assert backend.leftovers() == []


async def test_kv_agent_on_docker_through_temporal(monkeypatch, client, worker):
    from episodes.client import EpisodesClient

    monkeypatch.setenv("EPISODES_TEST_UPSTREAM_KEY", UPSTREAM_KEY)
    async with ScriptedUpstream(policy=kv_policy, key=UPSTREAM_KEY) as upstream:
        data = agent_spec(upstream.base_url)
        data["name"] = f"docker-agent-{backend.RUN_ID}"
        data["harness"]["runtime"] = {"type": "docker", "image": backend.AGENT_IMAGE}
        data["harness"]["ready_timeout_s"] = 60
        spec = parse_spec(data)
        episodes = EpisodesClient(client, task_queue="episodes-test")
        result = await episodes.run_episode(spec, spec.tasks[0])
    assert result.termination == "env_done", result.error
    assert result.reward == 1.0
    transcript = await episodes.transcript(result.workflow_id)
    assert [c.name for c in transcript.tool_calls()] == ["put", "put"]
    assert len(transcript.model_calls()) == 3
    containers = backend.client().api.containers(
        all=True, filters={"label": f"episodes.workflow={result.workflow_id}"}
    )
    assert containers == []


# Any image but ours: the harness image with the in-box relay's prerequisites removed.
_STRIP = {
    "no-python3": "rm -f /usr/bin/python3 /usr/bin/python3.11",
    "no-relay": "rm -rf /opt/episodes/episodes/tunnel",
}


@pytest.fixture(scope="module", params=sorted(_STRIP))
def image_without_relay(request):
    tag = f"episodes-test-{request.param}:{backend.RUN_ID}"
    dockerfile = f"FROM {backend.IMAGE}\nRUN {_STRIP[request.param]}\n"
    subprocess.run(
        ["docker", "build", "-q", "-t", tag, "-"],
        input=dockerfile,
        text=True,
        capture_output=True,
        check=True,
        timeout=300,
    )
    yield tag
    subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, check=False)


def _no_relay_spec(base_url: str, image: str, name: str = "kv-agent"):
    data = agent_spec(base_url, name=name)
    data["harness"]["runtime"] = {"type": "docker", "image": image}
    return parse_spec(data)


async def test_an_image_without_the_relay_fails_start_in_one_line(monkeypatch, image_without_relay):
    from episodes.errors import HarnessStartFailed

    monkeypatch.setenv("EPISODES_TEST_UPSTREAM_KEY", UPSTREAM_KEY)
    async with ScriptedUpstream(policy=kv_policy, key=UPSTREAM_KEY) as upstream:
        spec = _no_relay_spec(upstream.base_url, image_without_relay)
        session = LiveSession(spec, spec.tasks[0], 0, "s-no-relay", labels=backend.labels())
        with pytest.raises(HarnessStartFailed) as failed:
            await session.open()
    message = failed.value.detail
    assert "\n" not in message
    assert "harness.runtime.image" in message and "scripts/build-image.sh" in message
    assert image_without_relay in message
    assert backend.leftovers() == []


async def test_an_image_without_the_relay_is_harness_start_failed_through_temporal(
    monkeypatch, client, worker, image_without_relay
):
    from episodes.client import EpisodesClient

    monkeypatch.setenv("EPISODES_TEST_UPSTREAM_KEY", UPSTREAM_KEY)
    async with ScriptedUpstream(policy=kv_policy, key=UPSTREAM_KEY) as upstream:
        name = f"no-relay-{backend.RUN_ID}-{image_without_relay.split(':')[0][-9:]}"
        spec = _no_relay_spec(upstream.base_url, image_without_relay, name=name)
        episodes = EpisodesClient(client, task_queue="episodes-test")
        result = await episodes.run_episode(spec, spec.tasks[0])
    # A named outcome, decided on the first attempt (a spec error: not retried).
    assert result.termination == "harness_start_failed", result.error
    assert "scripts/build-image.sh" in (result.error or "")
