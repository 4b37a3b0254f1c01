"""The shipped EpisodeWorkflow without issue 22's workflow lever: `provision`, then
`drive` on the session's queue (two activities, a workflow task between them), as
histories from before the `provision-and-drive` patch. For side-by-side runs only
(bench throughput, overhead): an `EpisodeWorker` made within `with_separate()` runs it."""

from __future__ import annotations

import contextlib
from unittest import mock

from temporalio import workflow

from workflows.episode import EpisodeWorkflow

with workflow.unsafe.imports_passed_through():
    from episodes.types.io import EpisodeInput
    from episodes.types.results import EpisodeResult

SEPARATE_WORKFLOW = "EpisodeWorkflowSeparate"


@workflow.defn(name=SEPARATE_WORKFLOW)
class SeparateProvisionEpisode(EpisodeWorkflow):
    @workflow.run
    async def run(self, inp: EpisodeInput) -> EpisodeResult:
        return await super().run(inp)

    def _fuses(self) -> bool:
        return False


def with_separate() -> contextlib.AbstractContextManager[object]:
    """While it is open, a new `EpisodeWorker` also runs `SeparateProvisionEpisode`."""
    import workers.worker
    from workflows import WORKFLOWS

    return mock.patch.object(workers.worker, "WORKFLOWS", [*WORKFLOWS, SeparateProvisionEpisode])
