"""BatchReceiptsWorkflow: a batch's record of the groups its trainer consumed.

One per batch (`contract.receipts_workflow_id`: `<batch>.receipts`), started by the first
record sent to it (signal-with-start). Two signals, both idempotent: `ack` (a group
id the trainer acknowledged: it never gets that group again) and `dispatched` (the
version a group was dispatched at, for the staleness of a trainer that restarts).
The workflow ends once every group of the batch is acknowledged, and continues as new
(carrying its state) when the server suggests it, so its history stays bounded.

The client reads the receipts back from its history (`episodes.client.group.receipts`),
not by a query: a signal is recorded once the server accepted it, whether or not a
worker has run the workflow since. Deterministic: signals and state only, no activity.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from episodes import contract
    from episodes.types.receipts import Dispatched, ReceiptsInput


@workflow.defn(name=contract.RECEIPTS_WORKFLOW)
class BatchReceiptsWorkflow:
    def __init__(self) -> None:
        self._acked: dict[str, None] = {}  # insertion-ordered set
        self._versions: dict[str, int] = {}

    @workflow.signal(name=contract.ACK)
    def ack(self, group_id: str) -> None:
        self._acked[group_id] = None

    @workflow.signal(name=contract.DISPATCHED)
    def dispatched(self, d: Dispatched) -> None:
        self._versions[d.group_id] = d.version

    @workflow.query(name=contract.PROGRESS)
    def progress(self) -> dict[str, object]:
        return {"acked": len(self._acked), "dispatched": len(self._versions)}

    @workflow.run
    async def run(self, inp: ReceiptsInput) -> ReceiptsInput:
        for g in inp.acked:
            self._acked.setdefault(g, None)
        self._versions = {**inp.versions, **self._versions}
        await workflow.wait_condition(
            lambda: len(self._acked) >= inp.groups or workflow.info().is_continue_as_new_suggested()
        )
        state = inp.model_copy(update={"acked": list(self._acked), "versions": self._versions})
        if len(self._acked) >= inp.groups:
            return state
        workflow.continue_as_new(state)
