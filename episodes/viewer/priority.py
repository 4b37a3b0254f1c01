"""A batch's place on shared workers, for its page: priority and fairness key (indexed on
its episodes), and for a batch run by the server (EvalBatchWorkflow) its status and
what it spent against its budget (`spec.budget`)."""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus

from episodes import contract
from episodes.client.batch.live import live_figure
from episodes.types.io import BatchProgress, BatchResult
from episodes.types.metrics import BatchMetrics


async def batch_priority(client: Client, batch: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """`priority`, `fairness_key` (None: the server's defaults); while episodes run,
    `live`, `waiting` and `parked` (`episodes.client.batch.live`); with a batch workflow,
    `status` (`budget_exhausted` names the budget in `budget`), `model_tokens`,
    `model_calls`, `episode_seconds`, `groups_zero_variance` (None: one sample per task),
    `cost` (`episodes.types.cost.Cost`, None: no episode priced) and `priced`."""
    first = rows[0] if rows else {}
    out: dict[str, Any] = {
        "priority": first.get("priority"),
        "fairness_key": first.get("fairness_key"),
    }
    if any(r.get("status") == "running" for r in rows):
        # Episodes in flight: how many are live, wait for a box, are parked.
        with contextlib.suppress(Exception):
            figure = await live_figure(client, batch)
            out.update(live=figure.live, waiting=figure.waiting, parked=figure.parked)
    handle = client.get_workflow_handle(contract.batch_workflow_id(batch), result_type=BatchResult)
    try:
        desc = await handle.describe()
        if desc.status == WorkflowExecutionStatus.COMPLETED:
            result = await handle.result()
            metrics, status, budget = result.metrics, result.status, result.budget
        elif desc.status == WorkflowExecutionStatus.RUNNING:
            timeout = timedelta(seconds=5)
            progress = await handle.query(
                contract.PROGRESS, result_type=BatchProgress, rpc_timeout=timeout
            )
            metrics = await handle.query(
                contract.METRICS, result_type=BatchMetrics, rpc_timeout=timeout
            )
            status, budget = progress.status, None
        else:
            return out
    except Exception:  # no batch workflow (a client's batch), or none answers yet
        return out
    out.update(
        status=status,
        budget=budget,
        model_tokens=metrics.model_tokens,
        model_calls=metrics.model_calls,
        episode_seconds=metrics.episode_seconds,
        groups_zero_variance=metrics.groups_zero_variance if metrics.samples > 1 else None,
        cost=metrics.cost.model_dump(mode="json") if metrics.cost else None,
        priced=metrics.priced,
    )
    return out
