"""A batch run again after every episode's workflow failed (the usual fix-and-re-run):
the viewer's figures count the final attempt of each (task, sample), and every page's
first view is served with its data (read here as `curl` would: no script runs).

Real parts: the session's dev server and worker; the first run's episodes fail to
provision (a Docker image that does not exist) and are re-run as `.r1`, which fails
too; the second run reuses the failed ids and its episodes end `env_done`.
"""

from __future__ import annotations

import re
import uuid
from urllib.parse import quote

import pytest

from episodes.client import EpisodesClient
from tests.episodes.viewer.test_api import _indexed, _tasks
from tests.support.helpers import spec, wait_until

pytestmark = pytest.mark.timeout(240)
NO_BOX = {"runtime": {"type": "docker", "image": "episodes-no-such-image:none"}}


async def _rerun_batch(client) -> tuple[str, list]:  # type: ignore[no-untyped-def]
    name = f"vrr-{uuid.uuid4().hex[:6]}"
    ec = EpisodesClient(client, task_queue="episodes-test")
    broken = spec(name=name, tasks=_tasks(), harness=NO_BOX, batch_retries=1)
    first = [r async for r in ec.run_batch(broken)]
    assert {r.termination for r in first} == {"workflow_failed"}
    assert sorted(r.workflow_id for r in first) == [
        f"{name}.{t}.s0.r1" for t in ("missed", "solved")
    ]
    again = [r async for r in ec.run_batch(spec(name=name, tasks=_tasks(), batch_retries=1))]
    # The failed first ids are reused: the final attempts are `.s0`, not the `.r1`s.
    assert sorted(r.workflow_id for r in again) == [f"{name}.{t}.s0" for t in ("missed", "solved")]
    q = f'EpisodeBatch = "{name}" AND EpisodeTermination = "env_done"'
    assert await wait_until(lambda: _indexed(client, q, 2), timeout=30, interval=0.3)
    q = f'EpisodeBatch = "{name}" AND ExecutionStatus = "Failed"'
    assert await wait_until(lambda: _indexed(client, q, 4), timeout=30, interval=0.3)
    return name, again


async def test_a_rerun_batch_counts_its_final_attempts(client, worker, viewer) -> None:
    name, _ = await _rerun_batch(client)
    s = (await viewer.get("/api/batch", id=name))["stats"]
    assert (s["episodes"], s["attempts"], s["running"]) == (2, 6, 0)
    assert s["mean_reward"] == 0.5 and s["sides"] == {"ok": 2}
    assert s["terminations"] == {"env_done": 2} and s["pass_at_k"] == {"1": 0.5}
    [b] = (await viewer.get("/api/batches", batch=name))["batches"]
    assert (b["episodes"], b["mean_reward"]) == (2, 0.5)


def _text(html: str) -> str:
    """What a reader sees: the markup's text, whitespace squeezed."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


async def test_every_page_is_served_with_its_first_view(client, worker, viewer) -> None:
    name, results = await _rerun_batch(client)
    solved = next(r for r in results if r.task_id == "solved")
    missed = next(r for r in results if r.task_id == "missed")

    async def page(path: str, status: int = 200) -> str:
        resp = await viewer.http.get(path)
        assert resp.status_code == status, (path, resp.status_code, resp.text[:300])
        assert "loading…" not in resp.text
        return resp.text

    index = _text(await page("/?batch=" + name))
    assert f"{name} script 2" in index and "0.500" in index  # batch, env, episodes, mean
    batch_html = await page("/batch/" + quote(name, safe=""))
    batch = _text(batch_html)
    assert f"<title>{name} · episodes</title>" in batch_html
    assert "2 episodes" in batch and "6 attempts" in batch_html and "0.500 mean reward" in batch
    assert "0.500 pass@1" in batch and "0 infra failures" in batch
    assert "solved 1/1 1.000 s0 1.00 (±0.000)" in batch  # task, passed, mean, the sample
    assert f"{solved.workflow_id} solved 0 env_done 1.000 ±0.000 2" in batch
    # Every attempt is listed; those a later one replaced say so.
    assert f"{name}.solved.s0.r1 solved 0 workflow_failed replaced" in batch
    # Both episodes took 2 turns: one bin, labelled 2 (it read 2..3).
    turns = batch_html[batch_html.index("<h2>Turns") :]
    assert '<div class="axis one"><span>2</span></div>' in turns[:2000]

    episode = _text(await page("/episode/" + quote(solved.workflow_id, safe="")))
    assert f"{solved.workflow_id} env_done reward 1.000" in episode
    assert "Turn 0 env alpha harness alpha" in episode and "Turn 1 env beta" in episode
    compare = _text(await page(f"/compare?a={solved.workflow_id}&b={missed.workflow_id}"))
    assert "Compare · different tasks" in compare and "Turn 0 env gamma" in compare

    gone = _text(await page("/episode/no-such-episode", status=404))
    assert "no episode" in gone
    assert "compare needs two episodes" in _text(await page("/compare", status=400))
    bad = _text(await page("/batch/" + quote(name, safe="") + "?threshold=most", status=400))
    assert "threshold must be a number" in bad
