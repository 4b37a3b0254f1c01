"""The Temporal-facing client side: what trainers, the CLI and tests call.

    from episodes.client import EpisodesClient
    client = await EpisodesClient.connect("127.0.0.1:7233")

By concept:

- `core`: `EpisodesClient` (episodes, sessions, `run_batch`); `interactive`: the
  sessions a trainer steps;
- `batch/`: client-side batches (one member across its attempts, budgets, parking a
  batch, live counts) and batches run by the server (EvalBatchWorkflow);
- `group/`: a task's samples yielded whole, one workflow per member or per group;
- `histories/`: transcripts read back from workflow histories, forks that replay them;
- `blocking/`: `SyncEpisodesClient`, the blocking facade;
- `connect`, `config`, `devserver`, `devstate`, `exit`: reaching a Temporal server
  (configured, or the embedded one) and leaving a process that used the SDK.

The doctor and the schedules are in `episodes.ops`. The rest of `episodes/` is
Temporal-free.
"""

from episodes import _moved

# The modules' paths before they were grouped by concept: still importable.
_moved.alias(
    __name__,
    {
        "batches": "episodes.client.batch.server",
        "dispatch": "episodes.client.batch.dispatch",
        "spending": "episodes.client.batch.spending",
        "parking": "episodes.client.batch.parking",
        "live": "episodes.client.batch.live",
        "groups": "episodes.client.group.stream",
        "group_exec": "episodes.client.group.execution",
        "group_options": "episodes.client.group.options",
        "group_history": "episodes.client.group.history",
        "history": "episodes.client.histories.transcript",
        "fork": "episodes.client.histories.fork",
        "replaying": "episodes.client.histories.replaying",
        "sync": "episodes.client.blocking.client",
        "sync_group": "episodes.client.blocking.group",
        "sync_session": "episodes.client.blocking.session",
        "doctor": "episodes.ops.doctor",
        "doctor_local": "episodes.ops.doctor_local",
        "doctor_fleet": "episodes.ops.doctor_priority",
        "fleet": "episodes.client.batch.priority",
        "schedules": "episodes.ops.schedules",
    },
)

from episodes.client.blocking.client import SyncEpisodesClient  # noqa: E402
from episodes.client.core import EpisodesClient  # noqa: E402
from episodes.client.interactive import InteractiveSession  # noqa: E402
from episodes.errors import EpisodeFailed, SessionFailed, StepRejected  # noqa: E402

__all__ = [
    "EpisodeFailed",
    "EpisodesClient",
    "InteractiveSession",
    "SessionFailed",
    "StepRejected",
    "SyncEpisodesClient",
]
