"""`EpisodesClient`'s methods on episodes that replay their recorded turns exactly: fork
an episode at a turn (one branch each, or the branches as a group), park and resume
one episode or a whole batch. The work is in episodes/client/histories/fork.py and
episodes/client/batch/parking.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from temporalio.client import Client, WorkflowHandle

from episodes import contract
from episodes.types.results import EpisodeResult

if TYPE_CHECKING:
    from episodes.client.batch.parking import ParkReport
    from episodes.client.group.stream import Group


class ReplayMethods:
    """Mixed into `EpisodesClient` (its `client` and `task_queue`)."""

    client: Client
    task_queue: str

    async def fork(
        self,
        workflow_id: str,
        *,
        at_turn: int,
        samples: int = 1,
        policy_version: int | None = None,
    ) -> list[WorkflowHandle[object, EpisodeResult]]:
        """`samples` new episodes (`<id>.f<at_turn>.<i>`) that replay the episode's first
        `at_turn` turns exactly (box, harness, env, model and tool calls: no model call
        for them reaches the upstream), then go on live; their results carry
        `forked_from`. `policy_version`: the branches' (their live calls record it). The
        parent, running or finished, is untouched (episodes/client/histories/fork.py). The
        branches are a batch of their own, `<id>.f<at_turn>` (`episodes export` it)."""
        from episodes.client.histories.fork import fork_episode

        return await fork_episode(
            self.client,
            self.task_queue,
            workflow_id,
            at_turn=at_turn,
            samples=samples,
            policy_version=policy_version,
        )

    async def fork_group(
        self,
        workflow_id: str,
        *,
        at_turn: int,
        samples: int = 1,
        policy_version: int | None = None,
    ) -> Group:
        """`fork`, then the branches as one `Group` once all ended: advantages among the
        branches (`group.advantages()`), their samples with the replayed calls as prompt
        (`await group.samples()`); `group_id` `<id>.f<at_turn>/<task>`, as `episodes
        export <id>.f<at_turn>` names it."""
        from episodes.client.histories.fork import fork_group

        return await fork_group(
            self.client,
            self.task_queue,
            workflow_id,
            at_turn=at_turn,
            samples=samples,
            policy_version=policy_version,
        )

    async def park(self, workflow_id: str) -> None:
        """Park a running episode: at the next turn boundary it releases its box and
        harness (nothing runs, nothing is billed) and waits durably for `resume` (or its
        spec's `max_parked_s`). An interactive session's id parks it between two steps;
        its next `step` resumes it too (`InteractiveSession.park`)."""
        await self.client.get_workflow_handle(workflow_id).signal(contract.PARK)

    async def resume(self, workflow_id: str) -> None:
        """Resume a parked episode: a new session on any worker replays its recorded turns
        exactly (docs/failures.md: Exact replay), then it goes on. One not parked: a
        park asked and not taken yet is called off."""
        await self.client.get_workflow_handle(workflow_id).signal(contract.RESUME)

    async def park_batch(self, batch_id: str) -> ParkReport:
        """Park every running episode of the batch not parked or asked to park already
        (`park` for each): the workers are free for another job. The ids asked now,
        sorted, with `.already_asked` and `.parked` beside them
        (episodes/client/batch/parking.py)."""
        from episodes.client.batch.parking import park_batch

        return await park_batch(self.client, batch_id)

    async def resume_batch(self, batch_id: str) -> list[str]:
        """Resume the batch's episodes parked by `park_batch` (`resume` for each running
        one). The ids asked, sorted."""
        from episodes.client.batch.parking import signal_batch

        return await signal_batch(self.client, batch_id, contract.RESUME)
