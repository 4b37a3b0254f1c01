"""Every misbehaving harness mode through Temporal: the named termination, the episode
scored and released, no process of it left, and the worker still healthy."""

from __future__ import annotations

import uuid

import psutil
import pytest

from episodes.client import EpisodesClient
from tests.conftest import scripted_command
from tests.support.helpers import spec, turn_modes_fixture, wait_until

# Both `turn_mode`s: the drive (default) and one activity per turn.
turn_mode = turn_modes_fixture()

QUEUE = "episodes-test"
MESSAGES = ["a", "b", "c"]

MODES = [
    # (argv, termination, text the error must contain)
    (("slow-start", "delay=0.5"), "env_done", None),
    (("never-ready",), "harness_start_failed", "ready"),
    (("exit-now",), "harness_start_failed", "exit code 3"),
    (("crash-mid", "turn=1"), "harness_crashed", "crash-mid: fatal error at turn 1"),
    (("hang", "turn=1"), "turn_timeout", "no reply to turn 1"),
    (("garbage", "kind=text", "turn=1"), "protocol_error", "stdout"),
    (("oversize", "turn=1"), "protocol_error", "exceeds the maximum"),
    (("wrong-turn",), "protocol_error", "turn"),
    (("stdout-flood", "mb=200", "kind=raw", "turn=1"), "protocol_error", None),
    (("stderr-flood", "mb=20"), "env_done", None),
    (("ignore-sigterm",), "env_done", None),
    (("fork-grandchild", "then=echo"), "env_done", None),
    (("fork-grandchild", "then=hang"), "turn_timeout", None),
    (("error-reply", "turn=1"), "harness_error", None),
    # A reply nested 5,000 deep: a RecursionError failed the workflow (issue 19).
    (("deep", "what=reply", "turn=1"), "protocol_error", "deeper than 128 levels"),
]


def _procs_with(tag: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        cmd = p.info["cmdline"] or []
        if any(tag in part for part in cmd) and p.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(p)
    return found


@pytest.mark.parametrize(
    ("argv", "termination", "needle"), MODES, ids=["-".join(m[0]) for m in MODES]
)
async def test_mode_ends_in_named_outcome(client, worker, argv, termination, needle) -> None:
    tag = f"tag={uuid.uuid4().hex}"  # marks this episode's processes (grandchildren too)
    s = spec(
        name=f"bad-{argv[0]}-{uuid.uuid4().hex[:6]}",
        command=scripted_command(*argv, tag),
        tasks=[{"id": "t0", "data": {"messages": MESSAGES, "expected": MESSAGES}}],
        turn_timeout_s=2.0,
        harness={"ready_timeout_s": 2.0, "stop_timeout_s": 1.0},
    )
    result = await EpisodesClient(client, task_queue=QUEUE).run_episode(s, s.tasks[0])

    assert result.termination == termination, result.error
    if termination == "env_done":
        assert result.error is None and result.reward == 1.0
    else:
        assert result.error
        if termination == "harness_start_failed":
            assert result.reward is None  # never reset, never scored (issue 19)
        else:
            assert result.reward is not None  # scored: the replies before the failure count
        if needle:
            assert needle in result.error
    if argv[0] in {"exit-now", "crash-mid"}:
        assert "harness stderr" in result.error  # the tail comes with the failure
    # Released: the session is gone from the worker and nothing of it still runs.
    assert all(e.workflow_id != result.workflow_id for e in worker.registry.entries())
    assert await wait_until(lambda: not _procs_with(tag), timeout=10), _procs_with(tag)


async def test_a_reported_error_the_env_handles_is_one_failed_turn(client, worker) -> None:
    """An `error` packet fails its turn, not the episode, when the env takes it
    (`step_error`): the same harness gets the next turn, and the history records the
    failed turn (both turn modes)."""
    from tests.support.envs import FORGIVING

    s = spec(
        name=f"forgiven-{uuid.uuid4().hex[:6]}",
        env=FORGIVING,
        env_args={"done_at": 4},
        command=scripted_command("error-reply", "turn=1"),
        tasks=[{"id": "t0"}],
    )
    c = EpisodesClient(client, task_queue=QUEUE)
    handle = await c.start_episode(s, s.tasks[0])
    result = await handle.result()
    assert (result.termination, result.turns, result.error) == ("env_done", 4, None)
    assert result.score_details == {"stepped_errors": [1], "errors": [1]}
    transcript = await c.transcript(handle.id)
    assert [t.error_type for t in transcript.turns] == [None, "harness_error", None, None]
    assert transcript.turns[2].message == transcript.turns[2].reply == "after the error in turn 1"


async def test_a_harness_streaming_past_its_turn_budget_ends_protocol_error(client, worker):
    """400 events of 1 MiB in one turn were all accepted: the episode ended `env_done`
    and the worker grew to 933 MB (issue 19). The default budget is 64 MiB a turn."""
    from tests.support.procs import PeakRss

    s = spec(
        name=f"flood-{uuid.uuid4().hex[:6]}",
        command=scripted_command("flood", "n=400", "kb=1024"),
        tasks=[{"id": "t0", "data": {"messages": MESSAGES, "expected": MESSAGES}}],
        turn_timeout_s=120.0,  # a hang guard only: the budget must end the turn
    )
    with PeakRss() as rss:
        result = await EpisodesClient(client, task_queue=QUEUE).run_episode(s, s.tasks[0])
    assert result.termination == "protocol_error", result.error
    assert "harness.limits.turn_bytes" in (result.error or "")
    assert rss.growth_mib < 400, f"the worker grew by {rss.growth_mib:.0f} MiB"


async def test_worker_still_healthy_after_the_misbehaviour(client, worker) -> None:
    s = spec(name=f"healthy-{uuid.uuid4().hex[:6]}")
    result = await EpisodesClient(client, task_queue=QUEUE).run_episode(s, s.tasks[0])
    assert result.termination == "env_done"
