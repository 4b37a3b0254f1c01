"""A harness that tries to leave its box, on a real worker beside a live session with a
model: it must not read the worker's upstream key or the other session's tokens from
/proc, reach the Temporal frontend, write the worker's files, or leave a daemon that
outlives its session (issue 19). On the default runtime (the sandbox) and on Docker."""

from __future__ import annotations

import signal
import tempfile
import uuid
from pathlib import Path
from typing import Any

import pytest

from episodes.client.histories.transcript import fetch_transcript
from tests.support.chaos.helpers import (
    HARNESS,
    WorkerProc,
    containers_of,
    docker_api,
    new_tag,
    results,
    script_spec,
    start_all,
    tagged_processes,
    turns,
    wait_closed,
)
from tests.support.helpers import wait_until
from tests.workers.test_hostile import MOUNT, _docker

pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.timeout(240)]

# The worker's upstream key: the variable the healthy session's model spec names.
UPSTREAM = "EPISODES_CHAOS_UPSTREAM_KEY"
# What a session's harness holds: its bridge and proxy tokens.
SESSION_TOKENS = ["EPISODES_MCP_TOKEN", "OPENAI_API_KEY"]
LOOK_S = 5.0


async def _escape(
    chaos_server, client, tmp_path, monkeypatch, in_box: list[str], harness: dict[str, Any]
) -> tuple[dict[str, Any], list[Path], WorkerProc, str]:
    monkeypatch.setenv(UPSTREAM, f"upstream-{uuid.uuid4().hex}")  # the worker inherits it
    tag, healthy_tag = new_tag(), new_tag()
    outside = [tmp_path / f"escaped-{tag}", Path(tempfile.gettempdir()) / f"escaped-{tag}"]
    probe = [*in_box, "probe", f"look={','.join([UPSTREAM, *SESSION_TOKENS])}"]
    probe += [f"look_s={LOOK_S}", f"frontend={chaos_server.address}"]
    probe += [f"outside={','.join(map(str, outside))}", f"tag={tag}"]
    hostile = script_spec(
        f"escape-{uuid.uuid4().hex[:6]}",
        {"escape": ["probe:0", "probe:1"]},
        probe,
        reuse_key="escape",  # parked after a sweep: the sweep must find the daemon
        harness=harness,
    )
    # Live (with a model: its harness holds session tokens) for as long as the probe looks:
    # it waits at a held turn until the hold file goes, which happens once the escape
    # attempt has closed, however slow the machine (no race against its 40 turns).
    gate = tmp_path / "gate"
    gate.mkdir()
    hold = gate / "hold"
    hold.touch()
    messages = turns("beside", 8)
    messages[2] += ":held"
    healthy = script_spec(
        f"beside-{uuid.uuid4().hex[:6]}",
        {"beside": messages},
        ["{python}", str(HARNESS), "log", "delay=0.1", f"hold={hold}", f"tag={healthy_tag}"],
        model={"base_url": "http://127.0.0.1:9/v1", "model": "m", "api_key_env": UPSTREAM},
        harness={"runtime": {"type": "subprocess", "ro_paths": [str(gate)]}},
        turn_timeout_s=900,  # the held turn waits for the escape attempt, however long
    )
    queue = f"escape-{uuid.uuid4().hex[:6]}"
    worker = WorkerProc(chaos_server.address, queue, tmp_path / "worker.log").start()
    try:
        await worker.ready()
        [beside] = await start_all(client, queue, healthy)
        assert await wait_until(lambda: bool(tagged_processes(healthy_tag)), timeout=60)
        [escape] = await start_all(client, queue, hostile)
        closed = await wait_closed(client, [escape], timeout_s=180)
        assert len(closed) == 1, worker.text()
        # The other session was live all through the probe (held): a fair chance to find it.
        assert tagged_processes(healthy_tag), "the session beside ended before the probe did"
        hold.unlink()
        closed = await wait_closed(client, [beside], timeout_s=180)
        assert len(closed) == 1, worker.text()
        by_id = await results(client, [escape, beside])
        assert by_id[escape].termination == "env_done", by_id[escape]
        assert by_id[beside].termination == "env_done", by_id[beside]
        found = (await fetch_transcript(client, escape)).turns[0].reply
    except BaseException:
        worker.kill()
        raise
    print(f"\n  the escape attempt got: {found}")
    return found, outside, worker, tag


async def _assert_contained(found: dict[str, Any], outside: list[Path], worker, tag) -> None:
    assert found["environ"] == [], f"read other processes' environments: {found['environ']}"
    assert found["frontend"].startswith("refused"), found["frontend"]
    assert not [p for p in outside if p.exists()], "wrote the worker's files"
    # Its box was swept and parked (reuse_key): its daemon must be gone already.
    assert await wait_until(lambda: not tagged_processes(tag), timeout=30), (
        f"a daemon outlived its session: {tagged_processes(tag)}"
    )
    worker.signal(signal.SIGTERM)
    assert worker.wait(60) == 0, worker.text()
    assert not tagged_processes(tag)


async def test_escape_from_the_default_runtime(chaos_server, chaos_client, tmp_path, monkeypatch):
    found, outside, worker, tag = await _escape(
        chaos_server, chaos_client, tmp_path, monkeypatch, ["{python}", str(HARNESS)], {}
    )
    try:
        await _assert_contained(found, outside, worker, tag)
    finally:
        worker.kill()


@pytest.mark.docker
async def test_escape_from_a_docker_box(chaos_server, chaos_client, tmp_path, monkeypatch):
    api, why = docker_api()
    if api is None:
        pytest.skip(why)
    in_box = ["python3", f"{MOUNT}/{HARNESS.name}"]
    found, outside, worker, tag = await _escape(
        chaos_server, chaos_client, tmp_path, monkeypatch, in_box, _docker()
    )
    try:
        await _assert_contained(found, outside, worker, tag)
        assert containers_of(api, worker.worker_id) == []
    finally:
        worker.kill()
