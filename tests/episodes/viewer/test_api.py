"""The viewer's JSON API against real episodes (a dev server, a worker, real harnesses).

Each endpoint: `/api/batches` and `/api/episodes` (visibility, with filters), `/api/batch`
(the batch page's figures), `/api/episode` (paged, clipped), `/api/part` (one value
whole), `/api/progress` (a running episode's new turns), `/api/search` (streamed).
"""

from __future__ import annotations

import asyncio
import sys
import uuid

import pytest

from episodes.client import EpisodesClient
from tests.conftest import ROOT
from tests.episodes.viewer.conftest import UI
from tests.support.helpers import spec, wait_until

pytestmark = pytest.mark.timeout(240)
SLOW = [sys.executable, str(ROOT / "tests/support/harnesses/chaos_harness.py"), "log", "delay=0.4"]


def _tasks() -> list[dict]:
    return [
        {"id": "solved", "data": {"messages": ["alpha", "beta"], "expected": ["alpha", "beta"]}},
        {"id": "missed", "data": {"messages": ["gamma", "delta"], "expected": ["no", "pe"]}},
    ]


async def _indexed(client, query: str, n: int) -> bool:  # type: ignore[no-untyped-def]
    """Visibility lags completion: wait until `n` episodes match with their outcomes."""
    return (await client.count_workflows(query)).count == n


async def _run_batch(client, name: str, samples: int = 2, tasks=None) -> list:  # type: ignore[no-untyped-def]
    s = spec(name=name, tasks=tasks or _tasks())
    ec = EpisodesClient(client, task_queue="episodes-test")
    results = await asyncio.gather(
        *(ec.run_episode(s, t, k, batch_id=name) for t in s.tasks for k in range(samples))
    )
    q = f'EpisodeBatch = "{name}" AND EpisodeTermination = "env_done"'
    assert await wait_until(lambda: _indexed(client, q, len(results)), timeout=30, interval=0.3)
    return results


async def test_batches_batch_and_filters(client, worker, viewer) -> None:
    name = f"va-{uuid.uuid4().hex[:6]}"
    results = await _run_batch(client, name)
    assert {r.reward for r in results} == {0.0, 1.0}

    index = await viewer.get("/api/batches", batch=name)
    [b] = index["batches"]
    assert (b["batch"], b["episodes"], b["running"], b["env"]) == (name, 4, 0, "script")
    assert b["mean_reward"] == pytest.approx(0.5)
    unfiltered = await viewer.get("/api/batches")
    assert name in {x["batch"] for x in unfiltered["batches"]}

    data = await viewer.get("/api/batch", id=name)
    s = data["stats"]
    assert (s["episodes"], s["running"], s["terminations"]) == (4, 0, {"env_done": 4})
    assert s["sides"] == {"ok": 4}
    # Two tasks, two samples each: one always passes, one never: pass@1 = pass@2 = 0.5.
    assert s["pass_at_k"] == {"1": 0.5, "2": 0.5}
    groups = {g["task"]: g for g in s["groups"]}
    assert groups["solved"]["passed"] == 2 and groups["missed"]["mean_reward"] == 0.0
    assert all(m["advantage"] == 0.0 for g in groups.values() for m in g["samples"])
    assert sum(s["reward_histogram"]["counts"]) == 4
    assert s["turns"]["p50"] == 2 and s["duration_s"]["max"] > 0
    ids = [r["id"] for r in data["episodes"]]
    assert ids == sorted(ids) and {r["sample"] for r in data["episodes"]} == {0, 1}

    solved = await viewer.get("/api/episodes", batch=name, reward_min="0.5")
    assert {r["task"] for r in solved["episodes"]} == {"solved"}
    assert "EpisodeReward >= 0.5" in solved["query"]
    assert (await viewer.get("/api/episodes", batch=name, termination="turn_timeout"))[
        "episodes"
    ] == []
    since = await viewer.get("/api/episodes", batch=name, since="2000-01-01")
    assert len(since["episodes"]) == 4

    # A filter that cannot go into a query is the user's mistake: one line, 400.
    bad = await viewer.get("/api/episodes", status=400, batch='x" OR 1=1')
    assert "quotes" in bad["error"]
    assert "number" in (await viewer.get("/api/batches", status=400, reward_min="lots"))["error"]
    assert "no episodes" in (await viewer.get("/api/batch", status=404, id="no-such"))["error"]


async def test_batch_intervals_and_two_batches_compared(client, worker, viewer) -> None:
    """The batch page's figures with their intervals, and the comparison page of two
    batches: B solves the task A missed (the viewer reads visibility, as its batch page)."""
    tag = uuid.uuid4().hex[:6]
    a, b = f"vc-a-{tag}", f"vc-b-{tag}"
    await _run_batch(client, a)
    solved_both = [
        {**t, "data": {**t["data"], "expected": t["data"]["messages"]}} for t in _tasks()
    ]
    await _run_batch(client, b, tasks=solved_both)

    iv = (await viewer.get("/api/batch", id=a))["stats"]["intervals"]
    # Task means 1 and 0: mean 0.5, SE = stdev(1, 0) / sqrt(2) = 0.5; 2 of 4 passed.
    assert iv["mean_reward"]["value"] == 0.5
    assert iv["mean_reward"]["standard_error"] == pytest.approx(0.5)
    assert iv["pass_rate"]["value"] == 0.5 and len(iv["pass_rate"]["interval"]) == 2
    assert iv["pass_hat_k"]["2"]["value"] == 0.5
    page = (await viewer.http.get(f"/batch/{a}")).text
    assert "With their noise" in page and "pass rate (reward ≥ 1, Wilson)" in page
    assert 'action="/compare-batches"' in page

    d = await viewer.get("/api/compare-batches", a=a, b=b)
    assert d["batches"] == {"a": a, "b": b}
    # One paired difference of +1 (missed), one of 0: a single sign to flip, p = 1.
    assert d["difference"] == 0.5 and d["p_value"] == 1.0 and d["significant"] is False
    assert d["flipped"] == [{"task": "missed", "a": False, "b": True}]
    assert d["warnings"] == []  # the same spec: the same pins
    resp = await viewer.http.get("/compare-batches", params={"a": a, "b": b})
    assert resp.status_code == 200
    assert "within the noise" in resp.text and "Flipped tasks (1)" in resp.text
    assert f"A: {a}" in resp.text and "+0.500" in resp.text
    resp = await viewer.http.get("/compare-batches", params={"a": a})
    assert resp.status_code == 400 and "two batches" in resp.text
    assert (
        "no episodes"
        in (await viewer.get("/api/compare-batches", status=404, a=a, b="nope"))["error"]
    )


async def test_episode_pages_parts_and_the_ui_link(client, worker, viewer) -> None:
    messages = [f"m{i}" for i in range(7)]
    big = "x" * 300_000  # far over a list view's budget for one part
    s = spec(
        name=f"vp-{uuid.uuid4().hex[:6]}",
        tasks=[{"id": "t", "data": {"messages": [*messages, big]}}],
    )
    r = await EpisodesClient(client, task_queue="episodes-test").run_episode(s, s.tasks[0])
    assert r.termination == "env_done" and r.turns == 8

    first = await viewer.get("/api/episode", id=r.workflow_id, limit=3)
    assert first["total_turns"] == 8 and [t["turn"] for t in first["turns"]] == [0, 1, 2]
    assert first["turns"][1]["message"] == "m1" and first["turns"][1]["reply"] == "m1"
    assert first["episode"]["status"] == "completed" and first["episode"]["turns"] == 8
    assert first["result"]["termination"] == "env_done"
    assert first["ui_url"] == f"{UI}/namespaces/default/workflows/{r.workflow_id}"
    last = await viewer.get("/api/episode", id=r.workflow_id, offset=6, limit=50)
    assert [t["turn"] for t in last["turns"]] == [6, 7]
    clipped = last["turns"][1]
    assert len(clipped["message"]) < 5_000 and clipped["clipped"]["message"] > 300_000
    assert set(clipped["clipped"]) == {"message", "reply"}
    whole = await viewer.get("/api/part", id=r.workflow_id, turn=7, part="message")
    assert whole["value"] == big

    assert "no episode" in (await viewer.get("/api/episode", status=404, id="nope"))["error"]
    assert (
        "no turn"
        in (await viewer.get("/api/part", status=404, id=r.workflow_id, turn=99, part="message"))[
            "error"
        ]
    )
    assert (
        "no part"
        in (await viewer.get("/api/part", status=404, id=r.workflow_id, turn=0, part="events.5"))[
            "error"
        ]
    )
    assert (await viewer.get("/api/episode", status=400))["error"] == "id is required"


async def test_search_streams_hits_across_the_batch(client, worker, viewer) -> None:
    name = f"vs-{uuid.uuid4().hex[:6]}"
    await _run_batch(client, name, samples=1)
    lines = await viewer.lines("/api/search", batch=name, q="GAMMA")
    *hits, done = lines
    assert done["done"] and done["scanned"] == 2 and done["hits"] == len(hits)
    assert {(h["task"], h["turn"]) for h in hits} == {("missed", 0)}
    assert {h["where"] for h in hits} == {"message", "reply"}
    assert "gamma" in hits[0]["snippet"]
    capped = await viewer.lines("/api/search", batch=name, q="a", max_hits=1)
    assert len(capped) == 2 and capped[-1]["truncated"] is True


async def test_progress_follows_a_running_episode(client, worker, viewer) -> None:
    messages = [f"live{i}" for i in range(6)]
    s = spec(
        name=f"vl-{uuid.uuid4().hex[:6]}",
        command=SLOW,
        tasks=[{"id": "t", "data": {"messages": messages}}],
    )
    ec = EpisodesClient(client, task_queue="episodes-test")
    handle = await ec.start_episode(s, s.tasks[0])
    wid = handle.id
    seen: list[int] = []

    async def more() -> bool:
        p = await viewer.get("/api/progress", id=wid, since=len(seen))
        assert not p["closed"] or len(seen) == len(messages), p
        seen.extend(t["turn"] for t in p["turns"])
        return len(seen) >= 3

    assert await wait_until(more, timeout=60, interval=0.2)
    page = await viewer.get("/api/episode", id=wid)
    assert page["episode"]["status"] == "running" and page["result"] is None
    assert seen == list(range(len(seen)))  # in order, none twice
    await handle.result()
    closed = await viewer.get("/api/progress", id=wid, since=len(messages))
    assert closed["closed"] is True
    done = await viewer.get("/api/episode", id=wid)
    assert done["total_turns"] == len(messages) and done["result"]["termination"] == "env_done"


async def test_encrypted_payloads_are_decoded_with_the_key_and_placeholders_without(
    client, dev_server
) -> None:
    """Workers encrypt (AES-GCM); a viewer with the key reads the turns, one without
    shows what visibility knows and "encrypted" placeholders, never an error page."""
    import base64
    import contextlib

    from episodes.client.connect import connect
    from episodes.payloads import AesGcmEncryption, PayloadsConfig, data_converter
    from episodes.viewer import serve
    from tests.episodes.viewer.conftest import Viewer
    from workers.worker import EpisodeWorker, WorkerOptions

    SECRETS = ["SECRET-1", "SECRET-2", "SECRET-3"]
    keys = {"VIEWER_TEST_KEYS": "v1:" + base64.b64encode(b"K" * 32).decode()}
    conv = data_converter(
        PayloadsConfig(encryption=AesGcmEncryption(keys_env="VIEWER_TEST_KEYS")), environ=keys
    )
    keyed = await connect(dev_server.address, timeout_s=30, data_converter=conv)
    queue = f"viewer-enc-{uuid.uuid4().hex[:6]}"
    # Turns slower than the recorder's linger: some arrive by record_turns Updates.
    s = spec(
        name=f"ve-{uuid.uuid4().hex[:6]}",
        command=SLOW,
        tasks=[{"id": "t", "data": {"messages": SECRETS, "expected": SECRETS}}],
    )
    w = EpisodeWorker(keyed, WorkerOptions(task_queue=queue))
    running = asyncio.create_task(w.run())
    try:
        r = await EpisodesClient(keyed, task_queue=queue).run_episode(s, s.tasks[0])
    finally:
        w.request_stop()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(running, 30)
    assert r.termination == "env_done"
    q = f'EpisodeBatch = "{s.name}" AND EpisodeTermination = "env_done"'
    assert await wait_until(lambda: _indexed(client, q, 1), timeout=30, interval=0.3)

    for c, readable in ((keyed, True), (client, False)):
        async with serve(c, port=0) as running_viewer:
            v = Viewer(running_viewer.url)
            try:
                page = await v.get("/api/episode", id=r.workflow_id)
                hits = await v.lines("/api/search", batch=s.name, q="SECRET-2")
                batch = await v.get("/api/batch", id=s.name)
            finally:
                await v.http.aclose()
        # Visibility is never encrypted: the outcome shows either way.
        assert page["episode"]["termination"] == "env_done" and page["episode"]["reward"] == 1.0
        assert batch["stats"]["episodes"] == 1
        if readable:
            assert page["undecodable"] == []
            assert [t["message"] for t in page["turns"]] == ["SECRET-1", "SECRET-2", "SECRET-3"]
            assert page["result"]["termination"] == "env_done"
            assert len(hits) == 3  # message, reply, done
        else:
            assert page["undecodable"], "the page says what it could not decode"
            assert "SECRET" not in str(page)
            assert page["result"] is None and page["task"] is None
            assert all(t.get("undecodable") for t in page["turns"])
            assert hits[-1]["done"] and hits[-1]["hits"] == 0


async def test_agent_episode_shows_tool_and_model_calls(client, worker, viewer, monkeypatch):
    from episodes.model.scripted.server import ScriptedUpstream, kv_policy
    from episodes.types.spec import parse_spec
    from tests.episodes.session.test_agent_session import UPSTREAM_KEY, agent_spec

    monkeypatch.setenv("EPISODES_TEST_UPSTREAM_KEY", UPSTREAM_KEY)
    async with ScriptedUpstream(policy=kv_policy, key=UPSTREAM_KEY) as upstream:
        data = agent_spec(upstream.base_url)
        s = parse_spec({**data, "name": f"vk-{uuid.uuid4().hex[:6]}"})
        r = await EpisodesClient(client, task_queue="episodes-test").run_episode(s, s.tasks[0])
    assert r.termination == "env_done", r.error
    page = await viewer.get("/api/episode", id=r.workflow_id)
    events = [e for t in page["turns"] for e in t["events"]]
    tools = [e for e in events if e["kind"] == "tool_call"]
    models = [e for e in events if e["kind"] == "model_call"]
    assert (tools[0]["name"], tools[0]["arguments"]) == ("put", {"key": "a", "value": "1"})
    assert tools[0]["ms"] > 0 and "result" in tools[0]
    assert len(models) == 3
    content = models[0]["response"]["choices"][0]["logprobs"]["content"]
    assert content and {"token", "logprob"} <= set(content[0])
    assert models[0]["request"]["messages"], "the messages the model was sent"
    assert UPSTREAM_KEY not in str(page)
