"""A configuration error (an env module the worker cannot import, a secret file it cannot
read: a spec error while provisioning) ends the episode `harness_start_failed`, marked
`config_error`, with the fix in its error: never an infrastructure failure run again as
`<id>.r<n>`, in the client's batches and the server's (issue 27)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from episodes.client import EpisodesClient
from episodes.client.batch.server import batch_input, episode_results, start_batch
from tests.support.helpers import spec

QUEUE = "episodes-test"

CASES = {
    "unimportable-env": (
        {"env": "codeenv_nowhere:CodeEnv"},
        ["cannot import module 'codeenv_nowhere'", "PYTHONPATH"],
    ),
    "missing-secret-file": (
        {"harness": {"secrets": {"TOKEN": {"file": "/nonexistent/episodes-27/token"}}}},
        ["harness.secrets.TOKEN", "/nonexistent/episodes-27/token"],
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_client_batch_does_not_rerun_a_config_error(client, worker, case) -> None:
    over, needles = CASES[case]
    s = spec(name=f"cfg-{uuid.uuid4().hex[:6]}", batch_retries=2, **over)
    episodes = EpisodesClient(client, task_queue=QUEUE)
    [result] = [r async for r in episodes.run_batch(s)]
    assert result.workflow_id == f"{s.name}.t0.s0"  # not run again as `.r1`
    assert (result.termination, result.config_error) == ("harness_start_failed", True)
    assert result.reward is None
    assert result.error and all(n in result.error for n in needles), result.error
    assert "Traceback" not in result.error


async def test_server_batch_does_not_rerun_a_config_error(client, worker) -> None:
    s = spec(name=f"cfgb-{uuid.uuid4().hex[:6]}", batch_retries=2, **CASES["unimportable-env"][0])
    handle = await start_batch(client, batch_input(s), task_queue=QUEUE)
    result = await asyncio.wait_for(handle.result(), 120)
    m = result.metrics
    assert m.terminations == {"harness_start_failed": 1}
    assert (m.infra_failures, m.retried) == (0, 0)
    [episode] = await episode_results(client, result.batch, expected=1)
    assert episode.config_error and episode.workflow_id.endswith(".s0")
