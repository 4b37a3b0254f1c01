"""Inputs, state and outputs of EvalBatchWorkflow.

Pydantic and the standard library only: workflows import this module.

The input carries the tasks inline (a workflow cannot read a dataset file), and every
continue-as-new carries it again, so the whole input must fit in one Temporal payload
(2 MB by default on the server). `episodes.client.batches.batch_input` refuses inputs above
`MAX_INPUT_BYTES` with a clear message; for larger datasets keep the task data small
(paths or URLs the environment resolves) or split the dataset into several batches.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from episodes.metrics import BatchMetrics, MetricsAccumulator
from episodes.models import Model
from episodes.spec import EpisodeSpec

# Leaves headroom under the server's 2 MB payload limit for the carried-over state.
MAX_INPUT_BYTES = 1_500_000
# A run also continues-as-new after starting this many children, even if the server has
# not suggested it yet (its default suggestion comes at 4096 history events).
DEFAULT_CHILDREN_PER_RUN = 2000
# The termination recorded for an episode whose workflow failed (no EpisodeResult).
WORKFLOW_FAILED = "workflow_failed"


class BatchState(Model):
    """What one run of the batch hands to the next on continue-as-new."""

    next_index: int = 0  # work item i is task i // samples, sample i % samples
    metrics: MetricsAccumulator | None = None
    runs: int = 1  # runs in the continue-as-new chain so far, this one included
    started_at: datetime | None = None
    errors: list[str] = Field(default_factory=list)  # the last few child failures


class BatchInput(Model):
    spec: EpisodeSpec  # with `tasks` inline
    # None: the batch id is the workflow id (scheduled runs get a fresh one each time).
    batch: str | None = None
    schedule: str | None = None
    concurrency: int | None = Field(default=None, ge=1)  # None: spec.concurrency
    pass_threshold: float = 1.0
    children_per_run: int = Field(default=DEFAULT_CHILDREN_PER_RUN, ge=1)
    state: BatchState = Field(default_factory=BatchState)


BatchStatus = Literal["running", "draining", "done"]


class BatchProgress(Model):
    """What the `progress` query returns."""

    status: BatchStatus
    batch: str
    total: int
    done: int
    running: int
    failed: int  # episodes whose workflow failed (counted in `done`)
    runs: int
    last: str = ""  # the most recent finished episode, one line


class BatchResult(Model):
    batch: str
    spec_name: str
    schedule: str | None = None
    total: int
    runs: int  # runs in the continue-as-new chain
    elapsed_s: float  # from the first run's start to the end
    metrics: BatchMetrics
    errors: list[str] = Field(default_factory=list)
