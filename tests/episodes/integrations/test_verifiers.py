"""The `episodes-vf` verifiers environment through verifiers' own env server and client.

Real parts: verifiers 0.4 (`EnvServer` on a free port, `EnvClient.run(...)`: the call
prime-rl's orchestrator makes) in the verifiers venv, a Temporal dev server, episodes
workers in this venv, the LLM harness, the model proxy, and the scripted upstream
tokenizing with its chat template: the token ids the trace must carry are the ones a
real HTTP server served.

verifiers pins mcp 2.0 and openai < 3, so it lives in a venv of its own
(`.venv-verifiers`, made by `make venv`; EPISODES_VERIFIERS_PYTHON names another).
Skipped where there is none.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml

from episodes.model.scripted.chat_template import ChatTemplate
from episodes.model.scripted.server import ScriptedUpstream, kv_policy
from episodes.types.io import EpisodeProgress
from episodes.types.spec import EpisodeSpec, parse_spec
from tests.conftest import ROOT
from tests.episodes.session.test_agent_session import UPSTREAM_KEY, agent_spec
from tests.episodes.training.test_training import _thinking
from tests.support.helpers import spec as make_spec
from tests.support.helpers import wait_until
from tests.support.notebook import NOTEBOOK, sampling_policy
from tests.workflows.test_restart import _worker

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

VF_PYTHON = Path(os.environ.get("EPISODES_VERIFIERS_PYTHON", ROOT / ".venv-verifiers/bin/python"))
if not VF_PYTHON.exists():
    pytest.skip(f"no verifiers venv at {VF_PYTHON} (make venv makes it)", allow_module_level=True)


def _write(spec: EpisodeSpec, path: Path) -> str:
    path.write_text(yaml.safe_dump(spec.model_dump(mode="json", exclude_none=True)))
    return str(path)


def _rollout(spec_path: str, address: str, queue: str, base_url: str) -> subprocess.Popen:
    """prime-rl's side, in the verifiers venv (tests/support/verifiers_rollout.py)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [
            str(VF_PYTHON),
            "-m",
            "tests.support.verifiers_rollout",
            "--spec",
            spec_path,
            "--address",
            address,
            "--task-queue",
            queue,
            "--base-url",
            base_url,
            "--model",
            "scripted",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _episode(proc: subprocess.Popen, timeout: float = 240) -> dict:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-4000:]
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture(autouse=True)
def _upstream_key(monkeypatch):
    monkeypatch.setenv("EPISODES_TEST_UPSTREAM_KEY", UPSTREAM_KEY)


async def test_env_client_run_returns_the_served_tokens_and_the_reward(
    client, worker, tmp_path
) -> None:
    data = agent_spec("http://127.0.0.1:9/v1")  # the rollout's client replaces it
    data["name"] = f"vf-{uuid.uuid4().hex[:6]}"
    data["harness"]["inherit_env"] = ["PYTHONPATH"]
    spec = parse_spec(data)
    up = ScriptedUpstream(policy=kv_policy, key=UPSTREAM_KEY, template=ChatTemplate())
    async with up:
        proc = _rollout(
            _write(spec, tmp_path / "spec.yaml"),
            client.service_client.config.target_host,
            "episodes-test",
            up.base_url,
        )
        episode = await asyncio.to_thread(_episode, proc)
        served = up.served
    assert episode["ok"], episode["errors"]
    (trace,) = episode["traces"]
    assert trace["rewards"] == {"episode": 1.0} and trace["reward"] == 1.0
    assert trace["info"]["termination"] == "env_done" and trace["info"]["samples"] == 1
    (branch,) = trace["branches"]
    assert len(served) == 3  # put a, put b, done
    # The branch is the last call's prompt and what it sampled, token for token.
    assert branch["token_ids"] == served[-1]["prompt_token_ids"] + served[-1]["token_ids"]
    assert (
        branch["token_ids"][: len(served[0]["prompt_token_ids"])] == (served[0]["prompt_token_ids"])
    )
    mask, lps = branch["sampled_mask"], branch["logprobs"]
    sampled = [t for t, m in zip(branch["token_ids"], mask, strict=True) if m]
    assert sampled == [t for c in served for t in c["token_ids"]]
    assert [lp for lp, m in zip(lps, mask, strict=True) if m] == [
        lp for c in served for lp in c["logprobs"]
    ]
    assert all(lp == 0.0 for lp, m in zip(lps, mask, strict=True) if not m)
    assert not any(mask[: len(served[0]["prompt_token_ids"])])
    # The rollout's model client reached the upstream: the proxy forced its model.
    assert {r["body"]["model"] for r in up.chat_requests} == {"scripted"}


async def test_a_template_that_drops_reasoning_gives_one_branch_per_call(
    client, worker, tmp_path
) -> None:
    """A reasoning model through /v1/chat/completions: each call's prompt lost the
    `<think>` the previous call sampled, so each call is a sample, hence a branch."""
    data = agent_spec("http://127.0.0.1:9/v1")
    data["name"] = f"vfr-{uuid.uuid4().hex[:6]}"
    data["harness"]["inherit_env"] = ["PYTHONPATH"]
    spec = parse_spec(data)
    up = ScriptedUpstream(
        policy=_thinking, key=UPSTREAM_KEY, template=ChatTemplate(drop_reasoning=True)
    )
    async with up:
        proc = _rollout(
            _write(spec, tmp_path / "spec.yaml"),
            client.service_client.config.target_host,
            "episodes-test",
            up.base_url,
        )
        episode = await asyncio.to_thread(_episode, proc)
        served = up.served
    (trace,) = episode["traces"]
    assert trace["info"]["samples"] == 3 and len(trace["info"]["splits"]) == 2
    assert trace["info"]["splits"][0] == (
        f"prefix_mismatch at token {len(served[0]['prompt_token_ids'])}"
    )
    branches = trace["branches"]
    assert len(branches) == len(served) == 3
    for b, c in zip(branches, served, strict=True):
        assert b["token_ids"] == c["prompt_token_ids"] + c["token_ids"]
        n = len(c["prompt_token_ids"])
        assert b["sampled_mask"] == [False] * n + [True] * len(c["token_ids"])
        assert b["logprobs"] == [0.0] * n + c["logprobs"]
    assert trace["rewards"] == {"episode": 1.0}


async def test_vf_eval_runs_the_same_env(client, worker, tmp_path) -> None:
    """`vf-eval` runs the Env in its own process (`run_slot`), no env server."""
    data = agent_spec("http://127.0.0.1:9/v1")
    data["name"] = f"vfe-{uuid.uuid4().hex[:6]}"
    data["harness"]["inherit_env"] = ["PYTHONPATH"]
    spec = parse_spec(data)
    up = ScriptedUpstream(policy=kv_policy, key=UPSTREAM_KEY, template=ChatTemplate())
    async with up:
        proc = subprocess.Popen(
            [
                str(VF_PYTHON.parent / "vf-eval"),
                "episodes-vf",
                "--env.taskset.spec",
                _write(spec, tmp_path / "spec.yaml"),
                "--env.taskset.address",
                client.service_client.config.target_host,
                "--env.taskset.task-queue",
                "episodes-test",
                "--model",
                "scripted",
                "--client.base-url",
                up.base_url,
                "-r",
                "2",
                "--no-rich",
                "--no-push",
                "--output-dir",
                str(tmp_path / "out"),
            ],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        out, _ = await asyncio.to_thread(proc.communicate, timeout=240)
    assert proc.returncode == 0, out[-4000:]
    assert "running 1x2 rollouts on scripted" in out
    (traces,) = (tmp_path / "out").glob("*/traces.jsonl")
    episodes = [json.loads(line) for line in traces.read_text().splitlines()]
    assert len(episodes) == 2 and all(e["ok"] for e in episodes)
    rewards = [t["rewards"]["episode"]["score"] for e in episodes for t in e["traces"]]
    assert rewards == [1.0, 1.0]
    ids = {t["info"]["workflow_id"] for e in episodes for t in e["traces"]}
    assert len(ids) == 2  # two rollouts, two episodes


async def _running_episode(client, queue: str) -> str:
    """The one episode on `queue` (each rollout's id is its own: find it by its queue)."""
    found: list[str] = []

    async def listed() -> bool:
        found[:] = [
            w.id
            async for w in client.list_workflows(
                f"TaskQueue = '{queue}' AND WorkflowType = 'EpisodeWorkflow'"
            )
        ]
        return len(found) == 1

    assert await wait_until(listed, timeout=60, interval=0.25)
    return found[0]


async def test_a_worker_sigkilled_mid_episode_still_delivers_the_episode_once(
    client, dev_server, tmp_path
) -> None:
    queue = f"vf-kill-{uuid.uuid4().hex[:6]}"
    procs = [_worker(dev_server.address, queue) for _ in range(2)]
    turns = 8
    spec = make_spec(
        name=f"vfk-{uuid.uuid4().hex[:6]}",
        env=NOTEBOOK,
        env_args={"delay_s": 0.3},
        max_turns=turns,
        turn_timeout_s=30.0,
        on_worker_lost="restart",
        worker_lost_timeout_s=3,
        harness={
            "command": ["{python}", "-m", "episodes.harness.reference.llm"],
            "ready_timeout_s": 30.0,
        },
        model={"base_url": "http://127.0.0.1:9/v1", "model": "scripted"},
    )
    try:
        async with ScriptedUpstream(policy=sampling_policy, template=ChatTemplate()) as up:
            rollout = _rollout(
                _write(spec, tmp_path / "spec.yaml"), dev_server.address, queue, up.base_url
            )
            wid = await _running_episode(client, queue)
            handle = client.get_workflow_handle(wid)

            async def far_enough() -> EpisodeProgress | None:
                try:
                    p = await handle.query("progress", result_type=EpisodeProgress)
                except Exception:
                    return None
                return p if p.turns_done >= 3 and p.session is not None else None

            assert await wait_until(far_enough, timeout=120, interval=0.25)
            progress = await far_enough()
            assert progress is not None and progress.session is not None
            [holder] = [w for w in procs if f"-{w.pid}-" in progress.session.worker_id]
            os.kill(holder.pid, signal.SIGKILL)
            holder.wait()
            episode = await asyncio.to_thread(_episode, rollout)
            sessions: dict[str, int] = {}
            for r in up.chat_requests:
                sid = r["headers"].get("X-Session-ID", "")
                sessions[sid] = sessions.get(sid, 0) + 1
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert episode["errors"] == [], episode["errors"]
    (trace,) = episode["traces"]
    info = trace["info"]
    # The same episode arrived, restarted once on the other worker.
    assert info["workflow_id"] == wid and info["termination"] == "max_turns"
    assert info["restarts"] == 1 and info["turns"] == turns
    # Each turn was delivered once: the restored session sent the upstream nothing for
    # the turns it replayed (two calls per live turn: the note, then the reply).
    assert len(sessions) == 2, sessions
    assert info["replay_divergences"] == 0 and info["turns_replayed"] >= 3
    restored = list(sessions.values())[-1]
    assert restored == 2 * (turns - info["turns_replayed"])
    # Its tokens still come back, every sampled token with its logprob.
    assert trace["branches"] and all(any(b["sampled_mask"]) for b in trace["branches"])
    for b in trace["branches"]:
        assert len(b["token_ids"]) == len(b["sampled_mask"]) == len(b["logprobs"])
    assert trace["rewards"]["episode"] == float(turns)  # one note per turn, none twice
