"""`episodes.integrations.trl.rollout_func` against TRL's documented rollout_func contract.

TRL itself pulls torch (through accelerate), so CI does not install it: the contract
test checks the returned dict's shape as `GRPOTrainer._generate` reads it (required
keys, one row per prompt, `env_mask` popped as the tool mask, every other key forwarded
to the reward functions per row) with real episodes on a worker and the scripted
upstream; `test_trl_takes_a_rollout_func` runs only where trl is installed.
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from types import SimpleNamespace

import pytest

from episodes.integrations.rows import EpisodeSplit
from episodes.integrations.trl import dataset_rows, episode_reward, rollout_func
from episodes.model.scripted.chat_template import ChatTemplate
from episodes.model.scripted.server import ScriptedUpstream, kv_policy
from episodes.types.spec import parse_spec
from tests.episodes.session.test_agent_session import UPSTREAM_KEY, agent_spec
from tests.episodes.training.test_training import _thinking

pytestmark = pytest.mark.timeout(240)

REQUIRED = {"prompt_ids", "completion_ids", "logprobs"}


@pytest.fixture(autouse=True)
def _upstream_key(monkeypatch):
    monkeypatch.setenv("EPISODES_TEST_UPSTREAM_KEY", UPSTREAM_KEY)


def _spec(base_url: str):
    data = agent_spec(base_url)
    data["name"] = f"trl-{uuid.uuid4().hex[:6]}"
    data["harness"]["inherit_env"] = ["PYTHONPATH"]
    return parse_spec(data)


def _trainer(**args):
    """What the rollout reads of a GRPOTrainer: its args' sampling settings."""
    return SimpleNamespace(args=SimpleNamespace(temperature=0.0, top_p=1.0, **args))


async def test_rollout_func_returns_one_trl_row_per_prompt(client, worker) -> None:
    up = ScriptedUpstream(policy=kv_policy, key=UPSTREAM_KEY, template=ChatTemplate())
    async with up:
        spec = _spec("http://127.0.0.1:9/v1")
        fn = rollout_func(
            spec,
            address=client.service_client.config.target_host,
            task_queue="episodes-test",
            base_url=up.base_url,
        )
        prompts = [row["prompt"] for row in dataset_rows(spec)] * 2  # num_generations = 2
        try:
            output = await asyncio.to_thread(fn, prompts, _trainer())
        finally:
            fn.close()
        served = up.served
    # TRL's own check, then its split into the fields it trains on and the rest.
    assert not REQUIRED - output.keys()
    extra = {k: v for k, v in output.items() if k not in REQUIRED}
    mask = extra.pop("env_mask")
    n = len(prompts)
    assert all(len(v) == n for v in output.values())
    for p, c, lp, m in zip(
        output["prompt_ids"], output["completion_ids"], output["logprobs"], mask, strict=True
    ):
        assert p and c and len(c) == len(lp) == len(m) and set(m) == {0, 1}
        assert all(x == 0.0 for x, k in zip(lp, m, strict=True) if not k)
    # Every row is one episode's whole sequence as the upstream served it: 3 calls each.
    assert len(served) == 3 * n
    finals = {tuple(c["prompt_token_ids"] + c["token_ids"]) for c in served}
    for p, c in zip(output["prompt_ids"], output["completion_ids"], strict=True):
        assert tuple(p + c) in finals
    sampled = sorted(
        t
        for c, m in zip(output["completion_ids"], mask, strict=True)
        for t, k in zip(c, m, strict=True)
        if k
    )
    assert sampled == sorted(t for c in served for t in c["token_ids"])
    # The reward reaches TRL's reward function, row by row.
    assert episode_reward(**extra) == [1.0] * n
    assert len(set(extra["workflow_id"])) == n  # a repeated prompt is the task's next sample
    assert {w.rsplit(".", 1)[1] for w in extra["workflow_id"]} == {"s0", "s1"}
    # The trainer's temperature reached the upstream through the spec's params.
    assert {r["body"]["temperature"] for r in up.chat_requests} == {0.0}


async def test_an_episode_that_splits_does_not_fit_one_row(client, worker) -> None:
    up = ScriptedUpstream(
        policy=_thinking, key=UPSTREAM_KEY, template=ChatTemplate(drop_reasoning=True)
    )
    async with up:
        spec = _spec(up.base_url)
        kw = {"address": client.service_client.config.target_host, "task_queue": "episodes-test"}
        strict = rollout_func(spec, **kw)
        last = rollout_func(spec, on_split="last", **kw)
        try:
            with pytest.raises(EpisodeSplit, match="split into 3 samples"):
                await asyncio.to_thread(strict, ["ab"], _trainer())
            output = await asyncio.to_thread(last, ["ab"], _trainer())
        finally:
            strict.close()
            last.close()
        final = up.served[-1]
    # The last sample only: the final call's prompt and what it sampled.
    assert output["prompt_ids"] == [final["prompt_token_ids"]]
    assert output["completion_ids"] == [final["token_ids"]]
    assert output["env_mask"] == [[1] * len(final["token_ids"])]


def test_trl_takes_a_rollout_func() -> None:
    trl = pytest.importorskip("trl", reason="trl pulls torch; CI does not install it")
    params = inspect.signature(trl.GRPOTrainer.__init__).parameters
    assert "rollout_func" in params
