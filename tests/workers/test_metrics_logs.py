"""A worker's Prometheus endpoint and JSON logs, scraped and read after real episodes."""

from __future__ import annotations

import json
import uuid

import pytest

from episodes import contract
from episodes.client import EpisodesClient
from episodes.model.scripted.server import ScriptedUpstream, kv_policy
from episodes.types.spec import parse_spec
from tests.support.helpers import spec as make_spec
from tests.support.worker_procs import WorkerProc, value

pytestmark = pytest.mark.slow
UPSTREAM_KEY = "sk-upstream-canary-metrics"


async def test_scrape_after_episodes_and_json_log_lines(dev_server, client, tmp_path) -> None:
    queue = f"metrics-{uuid.uuid4().hex[:6]}"
    w = WorkerProc(
        dev_server.address,
        queue,
        tmp_path / "worker.log",
        "--log-level",
        "DEBUG",
        EPISODES_TEST_UPSTREAM_KEY=UPSTREAM_KEY,
    )
    try:
        episodes = EpisodesClient(client, task_queue=queue)
        echo = make_spec(name=f"m-{uuid.uuid4().hex[:6]}")
        result = await episodes.run_episode(echo, echo.tasks[0])
        assert result.termination == "env_done" and result.turns == 3
        async with ScriptedUpstream(policy=kv_policy, key=UPSTREAM_KEY) as upstream:
            agent = parse_spec(
                {
                    "name": f"kv-{uuid.uuid4().hex[:6]}",
                    "env": "kv-store",
                    "tasks": [{"id": "ab", "data": {"goal": {"a": "1", "b": "2"}}}],
                    "max_turns": 4,
                    "harness": {
                        "command": "{python} -m episodes.harness.reference.llm --max-steps 8"
                    },
                    "model": {
                        "base_url": upstream.base_url,
                        "model": "scripted",
                        "api_key_env": "EPISODES_TEST_UPSTREAM_KEY",
                    },
                }
            )
            agent_result = await episodes.run_episode(agent, agent.tasks[0])
        assert agent_result.reward == 1.0, agent_result

        m = w.metrics()
        assert value(m, "episodes_provisions_total", outcome="ok") == 2
        assert value(m, "episodes_terminations_total", kind="env_done") == 2
        turns = result.turns + agent_result.turns
        assert value(m, "episodes_turn_seconds_count") == turns
        assert 0 < value(m, "episodes_turn_seconds_sum") < 60
        assert value(m, "episodes_agent_calls_total", kind="tool_call") == 2  # put a, put b
        assert value(m, "episodes_agent_calls_total", kind="model_call") == 3
        assert value(m, "episodes_live_sessions", worker=w.worker_id) == 0  # both released
        assert value(m, "episodes_max_sessions", worker=w.worker_id) == 256
        assert ("episodes_restarts_total", ()) not in m  # defined; nothing restarted
        # The SDK runtime's own series come through the same endpoint.
        assert value(m, "temporal_worker_task_slots_available") > 0
        assert any(name.startswith("temporal_") and "activity" in name for name, _ in m)
    finally:
        w.stop()

    lines = [json.loads(line) for line in w.log.read_text().splitlines() if line.startswith("{")]
    wid = contract.episode_id(echo.name, "t0", 0)
    mine = [r for r in lines if r["workflow_id"] == wid]
    assert mine, lines[-5:]
    provisioned = next(r for r in mine if r["message"].startswith("provisioned session"))
    assert provisioned["session_id"] and provisioned["session_id"].startswith(
        provisioned["workflow_id"]
    )
    turn_lines = [r for r in mine if r["message"].startswith("turn ")]
    assert [r["turn"] for r in turn_lines] == [0, 1, 2]
    assert all(r["session_id"] == provisioned["session_id"] for r in turn_lines)
    assert UPSTREAM_KEY not in w.log.read_text()


def test_restart_counter_is_defined() -> None:
    from activities import telemetry

    telemetry.record_restart("worker_lost")
    from prometheus_client import generate_latest

    assert b'episodes_restarts_total{kind="worker_lost"} 1.0' in generate_latest(telemetry.REGISTRY)
