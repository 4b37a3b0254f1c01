"""Agent episodes end to end through Temporal: tools over the bridge, the model via the proxy.

Real parts only: a dev server, a worker, the LLM harness (or an ACP agent) as a real
process, the scripted OpenAI-compatible upstream as a real HTTP server. The trainer
reads the calls back from history with `EpisodesClient.transcript`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import uuid

import psutil
import pytest

from episodes.client import EpisodesClient
from episodes.client.connect import connect
from episodes.model.scripted.server import ScriptedUpstream, kv_policy
from episodes.types.io import EpisodeProgress
from episodes.types.results import Task
from episodes.types.spec import parse_spec
from tests.conftest import ROOT
from tests.episodes.session.test_agent_session import UPSTREAM_KEY, agent_spec
from tests.support.helpers import pid_alive, wait_until
from workers.worker import EpisodeWorker, WorkerOptions

pytestmark = pytest.mark.timeout(180)

KEY_ENV = "EPISODES_TEST_UPSTREAM_KEY"
TOOLS_ENV = "tests.support.envs:Toolbox"


@pytest.fixture(autouse=True)
def _upstream_key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, UPSTREAM_KEY)


def _named(data: dict) -> dict:
    return {**data, "name": f"{data['name']}-{uuid.uuid4().hex[:6]}"}


async def test_kv_agent_records_tool_and_model_calls_for_the_trainer(client, worker):
    episodes = EpisodesClient(client, task_queue="episodes-test")
    async with ScriptedUpstream(policy=kv_policy, key=UPSTREAM_KEY) as upstream:
        spec = parse_spec(_named(agent_spec(upstream.base_url)))
        result = await episodes.run_episode(spec, spec.tasks[0])
        seen = {r["headers"].get("Authorization") for r in upstream.chat_requests}
    assert result.termination == "env_done", result.error
    assert result.reward == 1.0  # the env's store, changed only through the tools
    transcript = await episodes.transcript(result.workflow_id)
    tools = transcript.tool_calls()
    assert [(c.name, c.arguments) for c in tools] == [
        ("put", {"key": "a", "value": "1"}),
        ("put", {"key": "b", "value": "2"}),
    ]
    calls = transcript.model_calls()
    assert len(calls) == 3
    for call in calls:
        assert call.request["model"] == "scripted" and call.request["temperature"] == 0.0
        assert call.completion_logprobs, "token logprobs are kept for the trainer"
        assert call.prompt_ids and call.completion_ids
        assert len(call.completion_ids) == len(call.completion_logprobs)
    # The upstream saw its key, the harness only its session token; history has neither.
    assert seen == {f"Bearer {UPSTREAM_KEY}"}
    assert UPSTREAM_KEY not in transcript.model_dump_json()

    # A person reads the same calls with `episodes show`: one line per call.
    from tests.episodes.cli.test_cli import episodes as cli

    code, out, err = await cli(
        "show", result.workflow_id, "--address", client.service_client.config.target_host
    )
    assert code == 0, err
    assert """tool put({"key": "a", "value": "1"}) -> stored 'a'""" in out
    assert "model scripted: " in out and "tool calls put" in out


async def test_tool_error_is_an_mcp_error_and_the_episode_goes_on(client, worker):
    script = [
        {"tool_calls": [{"name": "explode", "arguments": {"why": "on purpose"}}]},
        {"tool_calls": [{"name": "note", "arguments": {"text": "after the error"}}]},
        "done",
    ]
    async with ScriptedUpstream(script, key=UPSTREAM_KEY) as upstream:
        data = _named(agent_spec(upstream.base_url))
        data["env"] = TOOLS_ENV
        data["tasks"] = [{"id": "boom"}]
        spec = parse_spec(data)
        episodes = EpisodesClient(client, task_queue="episodes-test")
        result = await episodes.run_episode(spec, spec.tasks[0])
    assert result.termination == "env_done", result.error
    assert result.reward == 1.0  # `note` ran after `explode` failed: the bridge lived on
    tools = (await episodes.transcript(result.workflow_id)).tool_calls()
    assert tools[0].name == "explode" and "on purpose" in (tools[0].error or "")
    assert (tools[1].name, tools[1].result, tools[1].error) == ("note", "noted", None)


async def test_upstream_5xx_is_retried_then_always_500_is_model_error(client, worker):
    episodes = EpisodesClient(client, task_queue="episodes-test")
    async with ScriptedUpstream(policy=kv_policy, key=UPSTREAM_KEY) as upstream:
        upstream.fail(2, 503)
        spec = parse_spec(_named(agent_spec(upstream.base_url)))
        ok = await episodes.run_episode(spec, spec.tasks[0])
        upstream.always_fail = 500
        failed = await episodes.run_episode(spec, spec.tasks[0], sample=1)
    assert ok.termination == "env_done" and ok.reward == 1.0
    first = (await episodes.transcript(ok.workflow_id)).model_calls()[0]
    assert first.attempts == 3 and first.status == 200
    assert failed.termination == "model_error"
    assert "model call failed after 3 attempt(s): upstream HTTP 500" in (failed.error or "")
    assert UPSTREAM_KEY not in (failed.error or "")


@pytest.mark.parametrize("box", ["subprocess", "modal", "prime"])
async def test_acp_agent_uses_the_bridge_and_the_proxy_across_turns(
    client, worker, box, monkeypatch
):
    """On a local box, and on Modal and Prime boxes (their SDK fakes, in this
    process's worker), where the bridge and the proxy are reached through the tunnel."""
    if box != "subprocess":
        import episodes.session.launch
        from tests.support.backends import modal_fake, prime_fake

        backend = {"modal": modal_fake, "prime": prime_fake}[box]
        monkeypatch.setattr(
            episodes.session.launch, "make_runtime", lambda *a, **k: backend.make_runtime()
        )
    agent = [sys.executable, str(ROOT / "tests" / "support" / "harnesses" / "acp_agent.py"), "ok"]
    async with ScriptedUpstream(["the answer is 42"], key=UPSTREAM_KEY) as upstream:
        data = _named(agent_spec(upstream.base_url))
        data.update(
            env="script",
            tasks=[
                {
                    "id": "acp",
                    "data": {
                        "messages": [
                            "remember this",
                            'mcp put {"key": "a", "value": "1"}',
                            "ask what is the answer?",
                        ]
                    },
                }
            ],
            env_args={},
        )
        data["env"] = TOOLS_ENV.replace("Toolbox", "ScriptedToolbox")
        data["harness"] = {
            "command": agent,
            "protocol": "acp",
            "ready_timeout_s": 20,
            "runtime": {"type": box},
        }
        spec = parse_spec(data)
        episodes = EpisodesClient(client, task_queue="episodes-test")
        result = await episodes.run_episode(spec, spec.tasks[0])
    assert result.termination == "env_done", result.error
    transcript = await episodes.transcript(result.workflow_id)
    replies = [t.reply["text"] for t in transcript.turns]
    assert "count=1" in replies[0]
    assert replies[1] == "episodes.put -> stored 'a'"
    assert replies[2] == "model: the answer is 42"
    assert [c.name for c in transcript.tool_calls()] == ["put"]
    assert len(transcript.model_calls()) == 1
    # The bridge's record sits in the turn that made the call, among the agent's updates.
    assert [e.get("kind") for e in transcript.turns[1].events].count("tool_call") == 1


async def test_worker_sigkilled_mid_turn_leaves_no_harness_bridge_or_proxy(dev_server):
    queue = f"agent-lost-{uuid.uuid4().hex[:6]}"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "episodes.cli.main",
            "worker",
            "--address",
            dev_server.address,
            "--task-queue",
            queue,
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, KEY_ENV: UPSTREAM_KEY},
    )
    client = await connect(dev_server.address)
    survivor = EpisodeWorker(client, WorkerOptions(task_queue=queue, max_sessions=0))
    running = asyncio.create_task(survivor.run())
    try:
        # The model takes a minute to answer: the kill lands mid-turn, mid-call.
        async with ScriptedUpstream(policy=kv_policy, key=UPSTREAM_KEY, delay_s=60) as upstream:
            data = _named(agent_spec(upstream.base_url))
            data.update(worker_lost_timeout_s=3, turn_timeout_s=300)
            spec = parse_spec(data)
            handle = await EpisodesClient(client, task_queue=queue).start_episode(
                spec, spec.tasks[0]
            )
            assert await wait_until(lambda: len(upstream.chat_requests) >= 1, timeout=60)
            worker = psutil.Process(proc.pid)
            harnesses = [p.pid for p in worker.children(recursive=True)]
            ports = [c.laddr.port for c in worker.net_connections("tcp") if c.status == "LISTEN"]
            assert harnesses and ports
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            result = await asyncio.wait_for(handle.result(), 60)
        assert result.termination == "worker_lost"
        assert await wait_until(lambda: not any(pid_alive(p) for p in harnesses), timeout=10)
        for port in ports:  # the bridge and the proxy died with their worker
            with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), 1):
                pass
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        survivor.request_stop()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(running, 30)


async def test_progress_shows_calls_while_running(client, worker):
    """The UI's live view: the drive's recorded turns carry their call events."""
    episodes = EpisodesClient(client, task_queue="episodes-test")
    async with ScriptedUpstream(policy=kv_policy, key=UPSTREAM_KEY) as upstream:
        data = _named(agent_spec(upstream.base_url))
        data["tasks"] = [
            {"id": "one", "data": {"goal": {"a": "1"}}},
        ]
        spec = parse_spec(data)
        handle = await episodes.start_episode(spec, Task.model_validate(data["tasks"][0]))
        result = await handle.result()
        progress = await handle.query("progress", result_type=EpisodeProgress)
    assert result.termination == "env_done"
    kinds = [e.get("kind") for t in progress.turns for e in t.events]
    assert "tool_call" in kinds and "model_call" in kinds
    json.dumps(progress.model_dump(mode="json"))  # what the UI's query view renders
