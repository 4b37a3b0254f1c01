"""What a batch workflow records of each member it ran (`workflows/batch.py`, and its
groups in `workflows/batch_groups.py`): defined once, below both.

Deterministic: workflow code; the standard library, temporalio and the types floor only.
"""

from __future__ import annotations

from dataclasses import dataclass

from temporalio import workflow
from temporalio.exceptions import FailureError

with workflow.unsafe.imports_passed_through():
    from episodes.types.cost import Cost


@dataclass
class MemberOutcome:
    """One member of a batch as the batch records it: an episode, or a group's member."""

    index: int
    task_id: str
    sample: int
    termination: str
    reward: float | None
    duration_s: float
    error: str | None = None
    infra: bool = False  # ended for an infrastructure reason (after its retries)
    retries: int = 0  # fresh episodes run for it after infrastructure failures
    model_calls: int = 0
    model_tokens: int = 0
    cost: Cost | None = None  # the episode's, under the spec's `prices`


def root_cause(e: BaseException) -> str:
    """The innermost failure's message: "Activity task failed" says nothing."""
    while isinstance(e, FailureError) and e.cause is not None:
        e = e.cause
    return getattr(e, "message", None) or str(e)
