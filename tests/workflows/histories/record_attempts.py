"""Record the histories of issue 40 §4 and issue 42's batch paths, for `test_replay.py`:

    .venv/bin/python -m tests.workflows.histories.record_attempts

On the time-skipping test server with the stand-in activities of the tests that
prove them (tests/workflows/test_budget_attempts.py, test_batch_parked.py):
- `batch_budget_rerun`: an attempt run again after an infrastructure failure, counted
  against the budget (the `batch-budget-every-attempt` marker), the budget reached;
- `batch_budget_failed`: a failed child's recorded usage read (`recorded_usage`);
- `batch_parked` and `episode_parked_in_batch`: a child that parks and resumes tells
  its batch (`park-tells-the-batch`, `episode_parked` signals).
Re-record only when these workflows' commands change on purpose.
"""

from __future__ import annotations

import asyncio
import uuid

from temporalio.client import Client

from episodes import contract
from tests.workflows.conftest import time_skipping_server
from tests.workflows.histories.record import _first_run, _save
from tests.workflows.test_batch_parked import test_a_server_batch_counts_its_parked_episodes
from tests.workflows.test_budget_attempts import Flaky, _server_batch


class _Env:
    """What the tests' helpers take: an object with the test server's `client`."""

    def __init__(self, client: Client) -> None:
        self.client = client


async def main() -> None:
    async with time_skipping_server() as server:
        client = server.client
        for name, fail, retries in (
            ("batch_budget_rerun", "infra", 1),
            ("batch_budget_failed", "workflow", 0),
        ):
            s = Flaky(client, fail)
            async with s.running():
                result = await _server_batch(_Env(client), s, retries)
            wid = contract.batch_workflow_id(result.batch)
            await _save(client, name, wid, await _first_run(client, wid))
        batch = f"bp-{uuid.uuid4().hex[:6]}"
        await test_a_server_batch_counts_its_parked_episodes(_Env(client), batch=batch)
        wid = contract.batch_workflow_id(batch)
        await _save(client, "batch_parked", wid, await _first_run(client, wid))
        child = contract.episode_id(batch, "t", 0)
        await _save(client, "episode_parked_in_batch", child, await _first_run(client, child))


if __name__ == "__main__":
    asyncio.run(main())
