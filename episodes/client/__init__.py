"""The Temporal-facing client side: what trainers, the CLI and tests call.

    from episodes.client import EpisodesClient
    client = await EpisodesClient.connect("127.0.0.1:7233")

`core` (EpisodesClient: episodes and client-side batches), `interactive` (sessions
the trainer steps), `sync` (the blocking facade), `batches` and `schedules`
(EvalBatchWorkflow runs), `connect`, `devserver` (the embedded Temporal server) and
`exit` (leaving a process that used the SDK). The rest of `episodes/` is
Temporal-free.
"""

from episodes.client.core import EpisodesClient
from episodes.client.interactive import InteractiveSession
from episodes.client.sync import SyncEpisodesClient
from episodes.errors import EpisodeFailed, SessionFailed, StepRejected

__all__ = [
    "EpisodeFailed",
    "EpisodesClient",
    "InteractiveSession",
    "SessionFailed",
    "StepRejected",
    "SyncEpisodesClient",
]
