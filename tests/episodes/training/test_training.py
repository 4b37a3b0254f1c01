"""Training samples from real agent episodes, and `episodes export`, end to end.

Real parts: a Temporal dev server and worker, the LLM harness as a process, the model
proxy, and the scripted upstream tokenizing with its chat template, so the token ids
the samples must reproduce are the ones a real HTTP server served.
"""

from __future__ import annotations

import asyncio
import json
import uuid

import pyarrow.parquet as pq
import pytest

from episodes.client import EpisodesClient
from episodes.client.batch.dispatch import dispatch_spec
from episodes.client.batch.server import episode_ids
from episodes.model.scripted.chat_template import ChatTemplate
from episodes.model.scripted.server import ScriptedUpstream, kv_policy
from episodes.training.export import COLUMNS
from episodes.training.samples import build_samples
from episodes.types.model import UpstreamSpec
from episodes.types.results import Task
from episodes.types.spec import parse_spec
from tests.episodes.cli.test_cli import episodes as cli
from tests.episodes.session.test_agent_session import UPSTREAM_KEY, agent_spec
from tests.support.helpers import wait_until

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(autouse=True)
def _upstream_key(monkeypatch):
    monkeypatch.setenv("EPISODES_TEST_UPSTREAM_KEY", UPSTREAM_KEY)


def _spec(base_url: str, *, stream: bool = False, **model):
    data = agent_spec(base_url)
    data["name"] = f"train-{uuid.uuid4().hex[:6]}"
    if stream:
        data["harness"]["command"] += " --stream"
    # The harness's environment is an allowlist: a worktree on PYTHONPATH reaches it too.
    data["harness"]["inherit_env"] = ["PYTHONPATH"]
    data["model"].update(model)
    return parse_spec(data)


def _thinking(messages, tools):
    """kv_policy, reasoning first: `<think>` before every answer."""
    step = kv_policy(messages, tools)
    if isinstance(step, str):
        return f"<think>all stored</think>{step}"
    return {**step, "content": "<think>next key</think>"}


@pytest.mark.parametrize("stream", [False, True])
async def test_samples_reproduce_the_served_token_ids(client, worker, stream):
    episodes = EpisodesClient(client, task_queue="episodes-test")
    up = ScriptedUpstream(policy=kv_policy, key=UPSTREAM_KEY, template=ChatTemplate())
    async with up:
        spec = _spec(up.base_url, stream=stream, policy_version=7, cache_salt=True)
        result = await episodes.run_episode(spec, spec.tasks[0])
    assert result.termination == "env_done" and result.reward == 1.0, result.error
    served = up.served
    assert len(served) == 3  # put a, put b, done: one turn, two tool results in between
    # The proxy sent the session id and the version's salt on every call.
    sessions = {r["headers"].get("X-Session-ID") for r in up.chat_requests}
    assert len(sessions) == 1 and None not in sessions
    assert {r["body"]["cache_salt"] for r in up.chat_requests} == {"episodes-policy-7"}

    calls = (await episodes.transcript(result.workflow_id)).model_calls()
    assert [c.policy_version for c in calls] == [7, 7, 7]
    built = build_samples(calls)
    assert built.complete and built.splits == 0
    (s,) = built.samples
    assert s.num_model_calls == 3 and s.split_reason is None
    assert s.prompt_ids == served[0]["prompt_token_ids"]
    # The whole sequence is the last call's prompt and what it sampled, token for token.
    assert (
        s.prompt_ids + s.completion_ids == served[-1]["prompt_token_ids"] + served[-1]["token_ids"]
    )
    sampled = [t for t, m in zip(s.completion_ids, s.completion_mask, strict=True) if m]
    assert sampled == [t for c in served for t in c["token_ids"]]
    lps = [lp for lp, m in zip(s.completion_logprobs, s.completion_mask, strict=True) if m]
    assert lps == [lp for c in served for lp in c["logprobs"]]
    assert all(
        lp == 0.0 for lp, m in zip(s.completion_logprobs, s.completion_mask, strict=True) if not m
    )
    assert 0 in s.completion_mask  # the tool results and the template's framing


async def test_a_template_that_drops_reasoning_splits_each_call(client, worker):
    episodes = EpisodesClient(client, task_queue="episodes-test")
    up = ScriptedUpstream(
        policy=_thinking, key=UPSTREAM_KEY, template=ChatTemplate(drop_reasoning=True)
    )
    async with up:
        spec = _spec(up.base_url)
        result = await episodes.run_episode(spec, spec.tasks[0])
    assert result.termination == "env_done", result.error
    built = build_samples((await episodes.transcript(result.workflow_id)).model_calls())
    served = up.served
    assert built.splits == 2 and len(built.samples) == 3
    # Each call's prompt lost the `<think>` the previous call sampled right after its
    # prompt: the sequences part exactly there.
    assert [s.split_reason for s in built.samples] == [
        None,
        f"prefix_mismatch at token {len(served[0]['prompt_token_ids'])}",
        f"prefix_mismatch at token {len(served[1]['prompt_token_ids'])}",
    ]
    for s, c in zip(built.samples, served, strict=True):
        assert (s.prompt_ids, s.completion_ids) == (c["prompt_token_ids"], c["token_ids"])
        assert s.completion_mask == [1] * len(c["token_ids"])


async def _run_batch(client, batch, specs_tasks) -> list:
    episodes = EpisodesClient(client, task_queue="episodes-test")
    results = [
        await episodes.run_episode(spec, task, sample, batch_id=batch)
        for spec, task, sample in specs_tasks
    ]
    # Visibility lags completion a little: the export lists what it sees.
    assert await wait_until(
        lambda: _visible(client, batch, len(results)), timeout=60, interval=0.25
    )
    return results


async def _visible(client, batch, n) -> bool:
    return len(await episode_ids(client, batch)) >= n


def _addr(client) -> list[str]:
    return ["--address", client.service_client.config.target_host]


async def test_export_writes_one_row_per_sample_with_exactly_the_columns(client, worker, tmp_path):
    batch = f"export-{uuid.uuid4().hex[:6]}"
    up = ScriptedUpstream(policy=kv_policy, key=UPSTREAM_KEY, template=ChatTemplate())
    async with up:
        spec = _spec(up.base_url, policy_version=3)
        one = Task(id="one", data={"goal": {"a": "1"}})
        results = await _run_batch(
            client, batch, [(spec, spec.tasks[0], 0), (spec, spec.tasks[0], 1), (spec, one, 0)]
        )
    assert all(r.reward == 1.0 for r in results)
    out = tmp_path / "samples.parquet"
    code, stdout, err = await cli("export", batch, "--out", str(out), *_addr(client))
    assert code == 0, err
    assert "3 samples from 3 episodes" in stdout
    table = pq.read_table(out)
    assert tuple(table.column_names) == COLUMNS
    rows = sorted(table.to_pylist(), key=lambda r: r["episode_id"])
    print("exported row:", json.dumps(rows[0]))
    assert [r["episode_id"] for r in rows] == sorted(r.workflow_id for r in results)
    by_id = {r.workflow_id: r for r in results}
    for row in rows:
        result = by_id[row["episode_id"]]
        assert (row["batch"], row["task_id"], row["sample"]) == (
            batch,
            result.task_id,
            result.sample,
        )
        assert row["group_id"] == f"{batch}/{result.task_id}"
        assert (row["sample_index"], row["policy_version"], row["split_reason"]) == (0, 3, None)
        # No rule reads the answers, no replica version: every token is the dispatch's.
        assert (row["min_policy_version"], row["max_policy_version"]) == (3, 3)
        assert row["completion_policy_versions"] == [3] * len(row["completion_ids"])
        assert (row["reward"], row["advantage"], row["termination"]) == (1.0, 0.0, "env_done")
        assert row["replay_divergences"] == 0  # never restarted: nothing replayed
        n = len(row["completion_ids"])
        assert len(row["completion_mask"]) == len(row["completion_logprobs"]) == n
    # The row is the sample built from that episode's history, exactly.
    first = by_id[rows[0]["episode_id"]]
    from episodes.client.histories.transcript import fetch_transcript

    (s,) = build_samples((await fetch_transcript(client, first.workflow_id)).model_calls()).samples
    assert rows[0]["prompt_ids"] == s.prompt_ids and rows[0]["completion_ids"] == s.completion_ids
    assert rows[0]["completion_logprobs"] == s.completion_logprobs
    assert rows[0]["num_model_calls"] == s.num_model_calls == 3  # ab: put a, put b, done

    # JSONL: the same rows.
    jsonl = tmp_path / "samples.jsonl"
    code, _, err = await cli("export", batch, "--out", str(jsonl), *_addr(client))
    assert code == 0, err
    lines = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert sorted(lines, key=lambda r: r["episode_id"]) == rows

    # The estimator by name, diverged episodes left out (none here): the same rows.
    args = ("--estimator", "rloo", "--skip-diverged", *_addr(client))
    code, stdout, err = await cli("export", batch, "--out", str(jsonl), *args)
    assert code == 0, err
    assert "3 samples from 3 episodes" in stdout and "diverged" not in stdout
    lines = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert sorted(lines, key=lambda r: r["episode_id"]) == rows
    code, _, err = await cli("export", batch, "--out", str(jsonl), "--estimator", "ppo")
    assert code == 2 and "grpo, rloo" in err


async def test_export_fails_closed_naming_an_episode_without_token_data(client, worker, tmp_path):
    batch = f"export-bad-{uuid.uuid4().hex[:6]}"
    up = ScriptedUpstream(policy=kv_policy, key=UPSTREAM_KEY, template=ChatTemplate())
    async with up:
        good = _spec(up.base_url)
        bad = _spec(up.base_url, token_data=False)  # the upstream sends no token data
        results = await _run_batch(
            client, batch, [(good, good.tasks[0], 0), (bad, bad.tasks[0], 1)]
        )
    out = tmp_path / "samples.parquet"
    code, _, err = await cli("export", batch, "--out", str(out), *_addr(client))
    assert code == 1
    assert results[1].workflow_id in err and "no prompt ids" in err
    assert results[0].workflow_id not in err
    assert not out.exists() and not list(tmp_path.iterdir())

    code, stdout, err = await cli(
        "export", batch, "--out", str(out), "--skip-incomplete", *_addr(client)
    )
    assert code == 0, err
    assert "skipped 1 incomplete episode" in stdout
    table = pq.read_table(out)
    assert table.column("episode_id").to_pylist() == [results[0].workflow_id]
    # The group's advantage counts the skipped episode's reward too.
    assert table.column("advantage").to_pylist() == [0.0]


async def test_weights_pushed_mid_episode_show_in_each_tokens_version(client, worker, tmp_path):
    """Issue 41 §1, end to end: the upstream names its weights (a header); a batch's
    episodes are half way through when the trainer pushes new weights to it. Every
    sample keeps going across the update, each token says which weights sampled it,
    the records say where the version came from, and the export carries it."""
    batch = f"versions-{uuid.uuid4().hex[:6]}"
    tasks = [{"id": t, "data": {"goal": {"a": "1", "b": "2"}}} for t in ("x", "y")]
    episodes_n = len(tasks) * 2
    up = ScriptedUpstream(
        policy=kv_policy, key=UPSTREAM_KEY, template=ChatTemplate(), policy_version=0
    )
    first_calls: set[str] = set()

    async def gate(seen: dict) -> None:
        # Each episode's first call is served by version 0; its later calls wait until
        # every episode has had its first, then version 1 serves them all.
        session = seen["headers"].get("X-Session-ID", "")
        if session not in first_calls:
            first_calls.add(session)
            return
        assert await wait_until(lambda: len(up.served) >= episodes_n, timeout=120)
        up.policy_version = 1

    up.gate = gate
    ec = EpisodesClient(client, task_queue="episodes-test")
    async with up:
        data = agent_spec(up.base_url, tasks=tasks, samples=2)
        data["name"] = batch
        data["harness"]["inherit_env"] = ["PYTHONPATH"]
        data["model"]["policy_version_from"] = {"header": "x-policy-version"}
        spec = parse_spec(data)
        stream = ec.run_batch(
            spec, batch_id=batch, groups=True, policy_version=0, concurrency=episodes_n
        )
        groups = [g async for g in stream]
    assert sorted(g.task_id for g in groups) == ["x", "y"]
    assert {s["policy_version"] for s in up.served} == {0, 1}
    for g in groups:
        assert all(r.termination == "env_done" for r in g.results), [r.error for r in g.results]
        for result, built in zip(g.results, await g.samples(), strict=True):
            calls = (await ec.transcript(result.workflow_id)).model_calls()
            assert [
                (c.policy_version, c.policy_version_source, c.dispatch_version) for c in calls
            ] == [
                (0, "upstream", 0),
                (1, "upstream", 0),
                (1, "upstream", 0),
            ]
            (s,) = built.samples  # one sample across the weight update
            assert built.splits == 0 and s.policy_version == 0
            assert (s.min_policy_version, s.max_policy_version) == (0, 1)
            versions = s.completion_policy_versions
            assert versions is not None and len(versions) == len(s.completion_ids)
            first = calls[0].completion_ids or []
            # The first call's sampled tokens are version 0's, everything after version 1's.
            assert versions == [0] * len(first) + [1] * (len(versions) - len(first))
            sampled = [v for v, m in zip(versions, s.completion_mask, strict=True) if m]
            assert sampled.count(0) == len(first) and sampled.count(1) > 0

    assert await wait_until(lambda: _visible(client, batch, episodes_n), timeout=60, interval=0.25)
    out = tmp_path / "versions.parquet"
    code, _, err = await cli("export", batch, "--out", str(out), *_addr(client))
    assert code == 0, err
    rows = pq.read_table(out).to_pylist()
    assert len(rows) == episodes_n
    for row in rows:
        assert (row["policy_version"], row["min_policy_version"], row["max_policy_version"]) == (
            0,
            0,
            1,
        )
        assert set(row["completion_policy_versions"]) == {0, 1}


async def test_a_replicas_new_version_reaches_running_episodes(client, worker):
    """The upstream names nothing; the trainer pushes weights to its one replica and
    dispatches an episode with the replica's new version. The worker's episodes
    already running there record it from their next call (source `replica`), and
    their samples show both versions."""
    batch = f"replica-{uuid.uuid4().hex[:6]}"
    tasks = [{"id": "x", "data": {"goal": {"a": "1", "b": "2"}}}]
    episodes_n = 2
    up = ScriptedUpstream(policy=kv_policy, key=UPSTREAM_KEY, template=ChatTemplate())
    first_calls: set[str] = set()
    pushed = asyncio.Event()

    async def gate(seen: dict) -> None:
        session = seen["headers"].get("X-Session-ID", "")
        if session not in first_calls:
            first_calls.add(session)
            return
        await pushed.wait()  # later calls: once the new version was dispatched

    up.gate = gate
    ec = EpisodesClient(client, task_queue="episodes-test")
    async with up:
        data = agent_spec(up.base_url, tasks=tasks, samples=episodes_n)
        data["name"] = batch
        data["harness"]["inherit_env"] = ["PYTHONPATH"]
        spec = parse_spec(data)
        ec.upstreams = [UpstreamSpec(base_url=up.base_url, policy_version=0)]
        stream = ec.run_batch(
            spec, batch_id=batch, groups=True, policy_version=0, concurrency=episodes_n
        )
        running = asyncio.create_task(anext(stream))
        assert await wait_until(lambda: len(up.served) >= episodes_n, timeout=120)
        # The trainer pushed weights to the replica: one more episode, at version 1.
        trainer = EpisodesClient(client, task_queue="episodes-test")
        trainer.upstreams = [UpstreamSpec(base_url=up.base_url, policy_version=1)]
        late = Task(id="late", data={"goal": {"a": "1"}})
        other = asyncio.create_task(
            trainer.run_episode(dispatch_spec(spec, 1, trainer.upstreams), late, 0)
        )
        assert await wait_until(lambda: len(up.served) > episodes_n, timeout=120)
        pushed.set()
        group = await running
        await stream.aclose()
        assert (await other).termination == "env_done"
    for result, built in zip(group.results, await group.samples(), strict=True):
        assert result.termination == "env_done", result.error
        calls = (await ec.transcript(result.workflow_id)).model_calls()
        assert [(c.policy_version, c.policy_version_source, c.dispatch_version) for c in calls] == [
            (0, "replica", 0),
            (1, "replica", 0),
            (1, "replica", 0),
        ]
        (s,) = built.samples
        first = calls[0].completion_ids or []
        assert s.completion_policy_versions == [0] * len(first) + [1] * (
            len(s.completion_ids) - len(first)
        )
        assert (s.policy_version, s.min_policy_version, s.max_policy_version) == (0, 0, 1)
