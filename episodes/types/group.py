"""Group execution's models: one workflow per group, its members addressed by id.

`run_batch(groups=True, execution="group")` runs the `samples` episodes of one task as
one `EpisodeGroupWorkflow` (`contract.GROUP_WORKFLOW`, id `<batch>.<task>.g`, a fresh
attempt `<id>.r<n>`) whose one `run_group` activity drives every member in-process
on the worker that took it. A member is addressed as `<group workflow id>.s<sample>`
(`member_id`): `episodes show`, the viewer, `episodes export` and
`EpisodesClient.transcript` take that id (`episodes.client.group.history`).

Models only: the workflow imports this module through the sandbox.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field

from episodes.types.base import Model
from episodes.types.cost import episode_cost, usage_by_model
from episodes.types.priority import records_usage
from episodes.types.results import Cut, EpisodeResult, Task, Termination, TurnResult

# `Execution` is defined beside the spec field that takes it; imported here as before.
from episodes.types.spec import EpisodeSpec, Execution  # noqa: F401

GROUP_SUFFIX = ".g"
_MEMBER = re.compile(r"^(?P<group>.+\.g(?:\.r\d+)?)\.s(?P<sample>\d+)$")


def group_workflow_id(batch: str, task_id: str) -> str:
    """The group's workflow id (its attempts: `contract.retry_id`)."""
    return f"{batch}.{task_id}{GROUP_SUFFIX}"


def member_id(group_workflow_id: str, sample: int) -> str:
    """A member of a group workflow: what `episodes show` and the viewer accept."""
    return f"{group_workflow_id}.s{sample}"


def parse_member(workflow_id: str) -> tuple[str, int] | None:
    """(group workflow id, sample) of a member id, or None when it names none."""
    m = _MEMBER.match(workflow_id)
    return (m.group("group"), int(m.group("sample"))) if m else None


class GroupInput(Model):
    """One group: the task's `samples` members, driven by one `run_group` activity."""

    spec: EpisodeSpec
    """The spec with this task alone (`contract.single_task_spec`)."""
    task: Task
    samples: int = Field(ge=1)
    batch: str
    group_workflow_id: str = ""
    """Set by the workflow before it schedules the activity (member ids derive from it)."""
    oversample: int = Field(default=0, ge=0)
    """Spare members (samples `samples .. samples+oversample-1`): the group ends once
    `samples` members ended, the rest are cut (`EpisodeResult.cut: straggler`)."""
    group_timeout_s: float | None = None
    """Past this long after the group's activity was first scheduled, the members still
    running are cut (`cut: group_timeout`); the group ends with those that ended."""

    @property
    def size(self) -> int:
        """Every member the group runs: its samples and its spares."""
        return self.samples + self.oversample


class MemberState(Model):
    """One member as the activity knows it: its recorded turns, and its result once
    it ended. What a heartbeat carries, so a retry on another worker restores it."""

    sample: int
    turns: list[TurnResult] = Field(default_factory=list)
    first_message: object = None
    result: EpisodeResult | None = None
    restarts: int = 0
    turns_replayed: int = 0
    replay_divergences: int = 0
    runtime: str | None = None
    """The runtime type its box ran on (a spillover one when the first had no room)."""


class GroupProgress(Model):
    """The `run_group` activity's heartbeat details and its result: every member."""

    members: list[MemberState] = Field(default_factory=list)


class GroupResult(Model):
    """The group workflow's result: one EpisodeResult per member (samples and spares),
    in sample order, each named by its member id; a cut member's says so (`cut`)."""

    workflow_id: str
    task_id: str
    results: list[EpisodeResult]


def member_result(
    group_workflow_id: str,
    spec: EpisodeSpec,
    task_id: str,
    m: MemberState,
    *,
    termination: Termination,
    error: str | None,
    duration_s: float,
    reward: float | None = None,
    score_details: dict[str, Any] | None = None,
    config_error: bool = False,
    cut: Cut | None = None,
) -> EpisodeResult:
    """A member's `EpisodeResult`, however it ended (by itself, cut, lost, or its group
    workflow failed): named by its member id, with its recorded turns counted and the
    model usage they carry (and its cost under the spec's `prices`). The one construction the activity, the group and batch
    workflows and the client share."""
    tokens, calls = records_usage(t.record for t in m.turns)
    usage = usage_by_model(e for t in m.turns for e in t.record.events)
    prices, runtime = spec.prices, m.runtime or spec.harness.runtime.type
    return EpisodeResult(
        workflow_id=member_id(group_workflow_id, m.sample),
        task_id=task_id,
        sample=m.sample,
        env=spec.env,
        spec_name=spec.name,
        termination=termination,
        error=error,
        turns=len(m.turns),
        reward=reward,
        score_details=score_details or {},
        duration_s=duration_s,
        restarts=m.restarts,
        turns_replayed=m.turns_replayed,
        replay_divergences=m.replay_divergences,
        runtime=m.runtime,
        model_calls=calls,
        model_tokens=tokens,
        usage=usage,
        cost=episode_cost(usage, duration_s, runtime, prices) if prices else None,
        config_error=config_error,
        cut=cut,
    )
