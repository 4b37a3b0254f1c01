"""`EpisodesClient.fork`: branches replay the parent's first turns exactly, then go live.

Real parts: a dev server, a worker, the LLM harness (the official `openai` SDK, one
conversation across turns) as a real process, the scripted tokenizing upstream (a real
chat template) counting the requests it gets, and a policy that samples a fresh word
per reply.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from episodes.client import EpisodesClient
from episodes.model.scripted.chat_template import ChatTemplate
from episodes.model.scripted.server import ScriptedUpstream
from episodes.training.samples import samples_of
from episodes.types.results import EpisodeResult
from episodes.types.spec import parse_spec
from tests.support.notebook import NOTEBOOK, sampling_policy

pytestmark = pytest.mark.timeout(240)


def _by_session(upstream: ScriptedUpstream) -> dict[str, list[int]]:
    """Each session's calls, as indexes into the upstream's served calls."""
    out: dict[str, list[int]] = {}
    for i, r in enumerate(upstream.chat_requests):
        out.setdefault(r["headers"].get("X-Session-ID", ""), []).append(i)
    return out


async def test_a_fork_replays_the_parent_exactly_then_samples_anew(
    client, worker, tmp_path
) -> None:
    episodes = EpisodesClient(client, task_queue="episodes-test")
    async with ScriptedUpstream(policy=sampling_policy, template=ChatTemplate()) as upstream:
        spec = parse_spec(
            {
                "name": f"fork-{uuid.uuid4().hex[:6]}",
                "env": NOTEBOOK,
                "tasks": [{"id": "t"}],
                "max_turns": 4,
                "harness": {"command": "{python} -m episodes.harness.reference.llm"},
                "model": {"base_url": upstream.base_url, "model": "scripted", "token_data": True},
            }
        )
        parent = await episodes.run_episode(spec, spec.tasks[0])
        assert (parent.termination, parent.turns) == ("max_turns", 4), parent.error
        assert len(upstream.chat_requests) == 8  # a note and a reply per turn
        before = await episodes.transcript(parent.workflow_id)
        handles = await episodes.fork(parent.workflow_id, at_turn=2, samples=4, policy_version=7)
        results = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), 180)
        served = list(upstream.served)
        sessions = _by_session(upstream)
        # The same from the command line: one branch at turn 3, its result in a file.
        from tests.episodes.cli.test_cli import episodes as cli

        out = tmp_path / "fork.jsonl"
        address = client.service_client.config.target_host
        code, _, err = await cli(
            *("fork", parent.workflow_id, "--at-turn", "3", "--samples", "1"),
            *("--out", str(out), "--address", address, "--task-queue", "episodes-test"),
        )
        assert code == 0, err
        cli_result = EpisodeResult.model_validate_json(out.read_text().strip())
        assert cli_result.workflow_id == f"{parent.workflow_id}.f3.0"
        assert (cli_result.turns_replayed, cli_result.replay_divergences) == (3, 0)
        assert len(upstream.chat_requests) == 8 + 4 * 4 + 2  # turn 3 only
    assert [r.workflow_id for r in results] == [f"{parent.workflow_id}.f2.{i}" for i in range(4)]
    for i, r in enumerate(results):
        assert (r.termination, r.turns, r.turns_replayed) == ("max_turns", 4, 2), r.error
        assert r.replay_divergences == 0
        assert r.forked_from is not None
        assert (r.forked_from.workflow_id, r.forked_from.at_turn) == (parent.workflow_id, 2)
        assert r.forked_from.branch == i
    # No branch sent the model anything for turns 0-1: 2 live turns x 2 calls each.
    assert len(served) == 8 + 4 * 4
    [parent_calls] = [c for s, c in sessions.items() if s.startswith(parent.workflow_id + ":")]
    turn2 = served[parent_calls[4]]["prompt_token_ids"]  # the parent's turn-2 prompt
    replies = set()
    for r in results:
        [calls] = [c for s, c in sessions.items() if s.startswith(r.workflow_id + ":")]
        assert len(calls) == 4
        first = served[calls[0]]["prompt_token_ids"]
        assert first == turn2  # the same conversation, to the token: an exact replay
        replies.add(tuple(served[calls[1]]["token_ids"]))
    assert len(replies) == 4  # sampled anew: the branches' completions differ

    # The branch's transcript starts with the parent's turns; their calls are prompt.
    branch = await episodes.transcript(results[0].workflow_id)
    assert branch.replayed_turns == 2 and len(branch.turns) == 4
    assert [t.message for t in branch.turns[:2]] == [t.message for t in before.turns[:2]]
    built = samples_of(branch)
    built.require_complete(results[0].workflow_id)
    calls = branch.model_calls()
    assert [c.policy_version for c in calls] == [None] * 4 + [7] * 4
    trained = sum(sum(s.completion_mask) for s in built.samples)
    assert trained == sum(len(c.completion_ids or []) for c in calls[4:])
    # The parent is untouched.
    after = await episodes.transcript(parent.workflow_id)
    assert after.model_dump() == before.model_dump()


async def test_the_branches_of_a_fork_are_a_group(client, worker, tmp_path) -> None:
    """`fork_group`: the branches as one Group, advantages among them only (never the
    parent); `episodes export <id>.f<k>` writes them as that one group, the replayed
    calls prompt only."""
    import json
    import statistics

    from tests.episodes.cli.test_cli import episodes as cli
    from tests.support.notebook import REWARDED_NOTEBOOK

    episodes = EpisodesClient(client, task_queue="episodes-test")
    async with ScriptedUpstream(policy=sampling_policy, template=ChatTemplate()) as upstream:
        spec = parse_spec(
            {
                "name": f"forkgroup-{uuid.uuid4().hex[:6]}",
                "env": REWARDED_NOTEBOOK,
                "tasks": [{"id": "t"}],
                "max_turns": 3,
                "harness": {"command": "{python} -m episodes.harness.reference.llm"},
                "model": {"base_url": upstream.base_url, "model": "scripted", "token_data": True},
            }
        )
        parent = await episodes.run_episode(spec, spec.tasks[0])
        assert (parent.termination, parent.turns) == ("max_turns", 3), parent.error
        group = await asyncio.wait_for(
            episodes.fork_group(parent.workflow_id, at_turn=2, samples=3), 180
        )
        samples = await group.samples()
    fork = f"{parent.workflow_id}.f2"
    assert (group.group_id, group.batch, group.task_id) == (f"{fork}/t", fork, "t")
    assert group.failed is None
    assert [r.workflow_id for r in group.results] == [f"{fork}.{i}" for i in range(3)]
    rewards = [r.reward for r in group.results]
    assert all(r is not None for r in rewards)
    mean = statistics.fmean(r for r in rewards if r is not None)
    advantages = group.advantages()
    assert advantages == pytest.approx([r - mean for r in rewards if r is not None])
    assert any(abs(a or 0.0) > 1e-9 for a in advantages)  # sampled anew: they differ
    # Each branch trains on its own turn only: 2 live calls, the 4 replayed are prompt.
    for built in samples:
        assert built.complete and sum(sum(s.completion_mask) for s in built.samples) > 0
        assert sum(s.num_model_calls for s in built.samples) == 6

    out = tmp_path / "fork.jsonl"
    address = client.service_client.config.target_host
    code, _, err = await cli(
        *("export", fork, "--out", str(out), "--address", address, "--task-queue", "episodes-test")
    )
    assert code == 0, err
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["group_id"] for r in rows} == {f"{fork}/t"}
    assert {r["episode_id"] for r in rows} == {r.workflow_id for r in group.results}
    by_id = {r.workflow_id: a for r, a in zip(group.results, advantages, strict=True)}
    for row in rows:
        assert row["advantage"] == pytest.approx(by_id[row["episode_id"]])
