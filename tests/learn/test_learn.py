"""`make learn`'s run, two versions of it through the real stack (issue 33).

The plumbing, not the learning: the summary's shape, every recorded logprob equal to
the policy's own recomputation from the sample's ids (under the weights that served
the call), both versions recorded, the server's weights swapped between them. Whether
reward rises is `make learn`'s to show (docs/learn.md), never a timed assertion here.
"""

from __future__ import annotations

import json
import uuid

import numpy as np
import pytest

from episodes.client import EpisodesClient
from episodes.training.samples import build_samples
from episodes.types.events import ModelCall
from learn.__main__ import quiesce
from learn.policy import END_ID, Vocab, interval, prompt_ids, token_logprob
from learn.server import PolicyServer, served_version
from learn.train import Config, Trainer, train

QUEUE = "episodes-test"


def _start(n: int = 31) -> dict[str, object]:
    return {
        "role": "user",
        "content": json.dumps({"low": 1, "high": n, "budget": 8, "feedback": None}),
    }


def _feedback(word: str) -> dict[str, object]:
    return {"role": "user", "content": json.dumps({"feedback": word, "turns_left": 5})}


def test_the_policy_reads_the_interval_from_the_conversation_ids() -> None:
    vocab = Vocab()
    messages = [_start(), {"role": "assistant", "content": "16"}, _feedback("higher")]
    messages += [{"role": "assistant", "content": "24"}, _feedback("lower")]
    assert interval(vocab, prompt_ids(messages)) == (17, 23)
    assert interval(vocab, prompt_ids([_start(20)])) == (1, 20)


def _episode(server: PolicyServer, turns: int) -> list[ModelCall]:
    """Calls as the proxy records them: the server's answers, through JSON."""
    messages: list[dict[str, object]] = [_start()]
    calls = []
    for _ in range(turns):
        body = {"messages": messages, "logprobs": True, "return_token_ids": True}
        answer = json.loads(json.dumps(server.complete(body)))
        # The version as the proxy reads it with learn's `policy_version_from` rule.
        record = {
            "request": body,
            "response": answer,
            "policy_version": served_version(answer),
            "policy_version_source": "upstream",
            "dispatch_version": 0,
        }
        calls.append(ModelCall.model_validate(record))
        messages += [{"role": "assistant", "content": answer["choices"][0]["message"]["content"]}]
        messages += [_feedback("higher")]
    return calls


def test_the_logprob_check_catches_weights_that_did_not_serve_the_call() -> None:
    """The check can fail: recomputed under other weights than the served ones, the
    same recorded tokens differ; under the served ones they agree exactly."""
    vocab = Vocab()
    server = PolicyServer(vocab, seed=1)
    trainer = Trainer(Config(), server)  # serves version 0 (zeros)
    served = np.linspace(-2.0, 2.0, vocab.size)
    server.load(served, 0)  # the server's weights, not what the trainer holds for v0
    calls = _episode(server, 3)
    built = build_samples(calls)
    assert len(built.samples) == 1 and built.splits == 0  # the calls merge: one sample
    tokens = trainer.tokens(built.samples[0], calls)
    assert [t.token == END_ID for t in tokens] == [False, True] * 3
    trainer.check(tokens)
    assert trainer.max_logprob_diff > 1e-3
    trainer.snapshots[0] = served
    trainer.max_logprob_diff = 0.0
    trainer.check(tokens)
    assert trainer.max_logprob_diff < 1e-12
    assert {served_version(c.response) for c in calls} == {0}
    one = tokens[2]
    assert token_logprob(vocab, served, one.context, one.token) == one.recorded


@pytest.mark.slow
async def test_two_versions_of_the_learning_run(client, worker) -> None:
    # Weights away from zero: uniform logprobs (-log k) would hide a rounded record.
    init = (-1.3, 0.21, -0.47, 0.93, 0.58, -0.11, 0.36, -0.72)
    cfg = Config(
        versions=2, groups_per_version=2, samples=2, concurrency=4, straggle_every=0, init=init
    )
    async with PolicyServer(Vocab(n=cfg.n), seed=3) as server:
        summary = await train(
            EpisodesClient(client, task_queue=QUEUE),
            server,
            cfg,
            batch=f"learn-{uuid.uuid4().hex[:6]}",
        )
        assert server.version == 1  # the weights were swapped once
        await quiesce(worker)  # the episodes cancelled on leaving release their boxes
    versions = summary["versions"]
    assert [v["policy_version"] for v in versions] == [0, 1]
    for v in versions:
        assert set(v) == {"policy_version", "mean_reward", "episodes", "stale_groups"}
        assert v["episodes"] >= cfg.samples and 0.0 <= v["mean_reward"] <= 1.0
    # Every sampled token of every episode was checked (a number and a stop per call).
    assert summary["tokens_checked"] >= 2 * sum(v["episodes"] for v in versions)
    assert summary["max_logprob_diff"] < 1e-4
    assert summary["failed_groups"] == 0


def test_a_trainer_resumes_from_its_checkpoint(tmp_path) -> None:
    """What `--kill-trainer-at` relies on: a trainer's checkpoint holds its version,
    weights, optimizer moments, snapshots, counts and the groups it trained, and a new
    trainer started on it serves those weights at that version."""
    vocab = Vocab()
    server = PolicyServer(vocab, seed=1)
    path = tmp_path / "trainer.json"
    first = Trainer(Config(), server, path)
    first.weights = np.linspace(-1.0, 1.0, vocab.size)
    first.version, first.snapshots[1] = 1, first.weights.copy()
    first.rewards[0] += [0.5, 1.0]
    first.lags[1] += [0, 2]
    first.trained += ["b/t0", "b/t1"]
    first.save()
    again = Trainer(Config(), server, path)
    assert again.version == 1 and server.version == 1
    assert np.array_equal(again.weights, first.weights) and np.array_equal(
        server.weights, first.weights
    )
    assert set(again.snapshots) == {0, 1} and again.rewards[0] == [0.5, 1.0]
    summary = again.summary()
    assert summary["groups_trained"] == 2 and summary["trained_twice"] == 0
    assert summary["lag"] == [{"trained_at": 1, "groups": 2, "mean_lag": 1.0, "max_lag": 2}]
