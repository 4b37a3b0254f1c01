"""The interceptors of a traced client and of every worker built on it.

`client_interceptors()` are given to `Client.connect`: the SDK's own
`TracingInterceptor` (the client's calls, the workflows, the activities), and
outside it `EpisodeContext`, under which every activity of an episode runs inside the
episode's trace. Placed outside the SDK's `TracingInterceptor` (`setup.client_interceptors`): a trace
context in the activity's headers (the workflow's, from a traced client) still wins
there, and without one the SDK's `RunActivity` span is parented on the episode's
trace root here (`context.episode_context`) instead of starting a trace of its own.
"""

from __future__ import annotations

from typing import Any

import temporalio.activity
import temporalio.client
import temporalio.worker

from episodes.traces.context import episode_context
from episodes.traces.setup import enabled


class EpisodeContext(temporalio.client.Interceptor, temporalio.worker.Interceptor):
    """Runs each activity inside its episode's trace context. Placed outside the SDK's
    `TracingInterceptor`: a header context (the workflow's) still wins there, and
    without one its `RunActivity` span is parented here instead of starting a trace.
    Given to `Client.connect` (the client part passes calls through untouched) so that
    every worker built on the client has it."""

    def intercept_activity(
        self, next: temporalio.worker.ActivityInboundInterceptor
    ) -> temporalio.worker.ActivityInboundInterceptor:
        return _InEpisode(next)


class _InEpisode(temporalio.worker.ActivityInboundInterceptor):
    async def execute_activity(self, input: temporalio.worker.ExecuteActivityInput) -> Any:
        workflow_id = temporalio.activity.info().workflow_id
        if not workflow_id:
            return await super().execute_activity(input)
        with episode_context(workflow_id):
            return await super().execute_activity(input)


def client_interceptors() -> list[Any]:
    """The interceptors a traced client (and its workers) runs with; [] when off."""
    if not enabled():
        return []
    from temporalio.contrib.opentelemetry import TracingInterceptor

    return [EpisodeContext(), TracingInterceptor()]
