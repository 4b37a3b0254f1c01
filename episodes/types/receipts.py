"""A batch's receipts: which of its groups the trainer consumed, and at which version each
was dispatched (`BatchReceiptsWorkflow`, `contract.RECEIPTS_WORKFLOW`, id `<batch>.receipts`).

The receipts are kept on the Temporal server, so a trainer that restarts (on another
machine too) resumes the batch where it left it: `episodes.client.group.receipts` reads
it back from their workflow's history. Models only: the workflow imports this module
through the sandbox.
"""

from __future__ import annotations

from pydantic import Field

from episodes.types.base import Model


class Dispatched(Model):
    """A group dispatched (or dispatched again after it went stale) at `version`."""

    group_id: str
    version: int


class ReceiptsInput(Model):
    """The receipts: their start input, and what continue-as-new carries."""

    batch: str
    groups: int = Field(ge=0)
    """The batch's groups: once every one is acknowledged the workflow ends."""
    acked: list[str] = []
    """The group ids acknowledged (`Group.ack()`), in order."""
    versions: dict[str, int] = {}
    """Per group id, the version its latest dispatch was at."""
