"""The viewer's reads of a running group member (`execution: group`), with real parts: a
dev server, the session's worker, a harness that never answers its second turn. Each
poll of the member's progress (and each page of it) reads its group's history once."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest
from temporalio.client import WorkflowHandle

from episodes.client import EpisodesClient
from episodes.types.group import group_workflow_id, member_id
from episodes.viewer.transcripts import Episodes
from tests.conftest import scripted_command
from tests.support.helpers import spec, wait_until

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def history_reads(monkeypatch) -> Counter[str]:  # type: ignore[no-untyped-def]
    """How many times each workflow's history was read (every read goes through
    `WorkflowHandle.fetch_history_events`, `fetch_history` too)."""
    reads: Counter[str] = Counter()
    original = WorkflowHandle.fetch_history_events

    def counted(self: WorkflowHandle, *args: Any, **kwargs: Any) -> Any:
        reads[self.id] += 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(WorkflowHandle, "fetch_history_events", counted)
    return reads


@contextlib.asynccontextmanager
async def running_group(client) -> AsyncIterator[str]:  # type: ignore[no-untyped-def]
    """A group of one member that answered turn 0 and hangs in turn 1; its group id."""
    s = spec(
        name=f"vmem-{uuid.uuid4().hex[:6]}",
        command=scripted_command("hang", "turn=1"),
        tasks=[{"id": "t", "data": {"messages": ["x", "y"]}}],
        turn_timeout_s=120.0,
        execution="group",
    )
    ec = EpisodesClient(client, task_queue="episodes-test")
    stream = ec.run_batch(s, groups=True)
    consumer = asyncio.ensure_future(anext(stream, None))
    try:
        yield group_workflow_id(s.name, "t")
    finally:
        consumer.cancel()
        with contextlib.suppress(BaseException):
            await consumer
        await stream.aclose()  # cancels the group's workflow


async def test_a_running_member_is_read_once_per_poll(client, worker, history_reads) -> None:
    episodes = Episodes(client)
    async with running_group(client) as group:
        member = member_id(group, 0)

        async def answered_turn_0() -> bool:
            with contextlib.suppress(Exception):
                return (await episodes.progress(member, 0))["turns_done"] >= 1
            return False

        assert await wait_until(answered_turn_0, timeout=120)
        history_reads.clear()
        polled = await episodes.progress(member, 0)
        assert polled["closed"] is False and polled["turns_done"] == 1
        assert [t["message"] for t in polled["turns"]] == ["x"]
        assert history_reads[group] == 1, history_reads

        history_reads.clear()
        page = await episodes.page(member)
        assert page["episode"]["id"] == member and page["total_turns"] == 1
        assert history_reads[group] == 1, history_reads
