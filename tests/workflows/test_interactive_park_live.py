"""Parking an interactive session on a real dev server (issue 30): while parked no harness
process runs; the trainer's next step brings it back on another worker, whose new
harness is sent the recorded steps again (its conversation rebuilt) before the new one.

Real parts: the session's dev server, in-process workers of the test's own on a fresh
queue, a real harness process that logs every turn packet it receives (with its pid);
and the LLM harness (the `openai` SDK, one conversation across turns) against the
scripted upstream, which samples a fresh word per reply: after the resume the
conversation it sends goes on from the recorded replies, none asked for again.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from episodes import contract
from episodes.client import EpisodesClient
from episodes.model.scripted.server import ScriptedUpstream
from episodes.types.spec import parse_spec
from tests.episodes.cli.test_cli import episodes as cli
from tests.support.chaos.helpers import HARNESS, TRUSTED, new_tag, script_spec, tagged_processes
from tests.support.helpers import wait_until
from tests.support.notebook import NOTEBOOK, sampling_policy
from tests.workflows.test_preempt import (
    LLM,
    _activity_workers,
    _harnesses,
    _name,
    _progress,
    _status_is,
    _Worker,
)

pytestmark = pytest.mark.timeout(300)

MESSAGES = [f"p:{i}" for i in range(4)]


def _seen(folder: Path) -> list[tuple[int, str, int]]:
    """(turn, message, pid) of every turn packet a harness received, in order."""
    lines = (folder / "p.log").read_text().splitlines()
    return [(d["turn"], d["message"], d["pid"]) for d in map(json.loads, lines)]


async def test_a_parked_session_holds_no_harness_and_a_step_resumes_it_elsewhere(
    client, dev_server, tmp_path
) -> None:
    queue, tag = _name("ipark"), new_tag()
    seen = tmp_path / "seen"
    seen.mkdir()
    spec = script_spec(
        _name("ipark"),
        {"p": MESSAGES},
        ["{python}", str(HARNESS), "log", f"dir={seen}", f"tag={tag}"],
        harness=TRUSTED,
    )
    first = _Worker(client, queue, _name("first"), max_sessions=2)
    second: _Worker | None = None
    try:
        ec = EpisodesClient(client, task_queue=queue)
        session = await ec.open_session(spec, spec.load_tasks()[0], idle_timeout_s=3600)
        for i in (0, 1):
            assert (await session.step(MESSAGES[i])).reply == MESSAGES[i]
        assert tagged_processes(tag), "the first worker should hold the harness"

        # `episodes park ID`, as for an episode.
        flags = ["--address", dev_server.address, "--task-queue", queue]
        code, out, err = await cli("park", session.workflow_id, *flags)
        assert code == 0 and f"park asked of {session.workflow_id}" in out, out + err

        async def parked() -> bool:
            p = await _progress(client, session.workflow_id)
            return p is not None and p.status == "parked" and p.session is None

        assert await wait_until(parked, timeout=60)
        # Nothing runs while parked: no harness process is left.
        assert await wait_until(lambda: not tagged_processes(tag), timeout=30)
        await first.stop()
        second = _Worker(client, queue, _name("second"), max_sessions=2)
        assert await wait_until(parked, timeout=30)  # a worker does not wake it

        # The next step resumes it on the second worker, then runs there.
        reply = await session.step(MESSAGES[2])
        assert (reply.turn, reply.reply, reply.done, reply.error) == (2, "p:2", False, None)
        last = await session.step(MESSAGES[3])
        assert last.done and last.termination == "env_done" and last.reward == 1.0
        result = await session.close()

        assert (result.termination, result.reward) == ("env_done", 1.0), result.error
        assert (result.turns, result.restarts, result.turns_replayed) == (4, 0, 2)
        assert result.replay_divergences == 0
        # The new harness was sent the two recorded steps again, then the two new ones.
        turns = _seen(seen)
        first_pid = turns[0][2]
        assert [(t, m) for t, m, pid in turns if pid == first_pid] == [(0, "p:0"), (1, "p:1")]
        assert [(t, m) for t, m, pid in turns if pid != first_pid] == list(enumerate(MESSAGES))
        # Who ran what: the first worker up to the park, the second from the resume on.
        ran = await _activity_workers(client, session.workflow_id)
        resumed = [k for k, _ in ran].index(contract.RESTORE)
        assert {w for _, w in ran[:resumed]} == {first.worker_id}, ran
        assert {w for _, w in ran[resumed:]} == {second.worker_id}, ran
        assert await wait_until(lambda: not tagged_processes(tag), timeout=30)
    finally:
        await first.stop()
        if second is not None:
            await second.stop()


async def test_a_parked_llm_session_resumes_with_its_conversation_replayed_exactly(
    client, worker
) -> None:
    async with ScriptedUpstream(policy=sampling_policy) as upstream:
        spec = parse_spec(
            {
                "name": _name("ipark-llm"),
                "env": NOTEBOOK,
                "tasks": [{"id": "t"}],
                "max_turns": 8,
                "harness": {"command": f"{{python}} -m {LLM}"},
                "model": {"base_url": upstream.base_url, "model": "scripted"},
            }
        )
        ec = EpisodesClient(client, task_queue="episodes-test")
        session = await ec.open_session(spec, spec.tasks[0], idle_timeout_s=3600)
        replies = [(await session.step(m)).reply for m in ("alpha", "beta")]
        sent = len(upstream.chat_requests)
        await session.park()
        assert await wait_until(lambda: _status_is(client, session.workflow_id, "parked"), 60)
        assert await wait_until(lambda: not _harnesses(LLM), timeout=30)
        assert len(upstream.chat_requests) == sent  # the upstream hears nothing parked

        third = await session.step("gamma")  # resumes it, then runs
        assert third.turn == 2 and third.error is None
        result = await session.close()
        after = upstream.chat_requests[sent:]
    assert (result.termination, result.turns, result.restarts) == ("closed", 3, 0), result.error
    assert (result.turns_replayed, result.replay_divergences) == (2, 0)
    # The replay asked the upstream nothing: only turn 2's two calls reached it.
    assert len(after) == 2
    conversation = after[0]["body"]["messages"]
    said = [m.get("content") for m in conversation if m["role"] == "assistant"]
    # The harness's conversation holds the recorded (sampled) replies, exactly.
    assert [r for r in replies if r in said] == replies, (replies, said)
    heard = [m["content"] for m in conversation if m["role"] == "user"]
    assert heard == ["alpha", "beta", "gamma"]
    # The notes tool was re-executed by the replay: the env's state is rebuilt.
    assert result.reward == 3.0
