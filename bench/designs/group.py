"""Grouped execution (issue 22's lever, measured, not shipped): one workflow per group.

`GroupEpisodes` runs one `run_group` activity that drives every episode of the group
to its end in-process on the worker that took it (`episodes.local`, the same
`LiveSession` path), and returns their results: a group pays one workflow's Temporal
cost (3 workflow tasks, 1 activity) instead of one per episode. What it gives up is
what `EpisodeWorkflow` is per episode: its own workflow, Updates, search attributes,
restart on a lost worker and `episodes show`; a worker lost loses the whole group.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    from bench.designs.models import GroupInput
    from episodes.types.results import EpisodeResult


@activity.defn(name="run_group")
async def run_group(inp: GroupInput) -> list[EpisodeResult]:
    from episodes.local import run_episode_local

    return list(await asyncio.gather(*(run_episode_local(inp.spec, t) for t in inp.tasks)))


@workflow.defn(name="GroupEpisodes")
class GroupEpisodes:
    @workflow.run
    async def run(self, inp: GroupInput) -> list[EpisodeResult]:
        return await workflow.execute_activity(
            run_group,
            inp,
            start_to_close_timeout=timedelta(
                seconds=inp.spec.max_turns * inp.spec.turn_timeout_s + 300
            ),
        )
