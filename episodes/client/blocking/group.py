"""`SyncGroup`: a `Group` of the blocking client (`SyncEpisodesClient.run_batch(...,
groups=True)`, `fork_group`). Importable from `episodes.client.blocking.client` (and
its old path `episodes.client.sync`) too.
"""

from __future__ import annotations

from episodes.client.blocking.session import LoopThread
from episodes.client.group.stream import Group
from episodes.training.estimators import Estimator
from episodes.training.samples import EpisodeSamples
from episodes.types.results import EpisodeResult


class SyncGroup:
    """`Group` with a blocking `samples()`: a task's samples in a batch, every member ended."""

    def __init__(self, loop: LoopThread, group: Group) -> None:
        self._loop = loop
        self.async_group = group

    @property
    def group_id(self) -> str:
        return self.async_group.group_id

    @property
    def batch(self) -> str:
        return self.async_group.batch

    @property
    def task_id(self) -> str:
        return self.async_group.task_id

    @property
    def policy_version(self) -> int | None:
        return self.async_group.policy_version

    @property
    def results(self) -> list[EpisodeResult]:
        return self.async_group.results

    @property
    def failed(self) -> str | None:
        return self.async_group.failed

    @property
    def retried(self) -> int:
        return self.async_group.retried

    @property
    def stale(self) -> int:
        return self.async_group.stale

    @property
    def staleness(self) -> int | None:
        return self.async_group.staleness

    def ack(self) -> None:
        """Record on the server that the trainer consumed this group (`Group.ack`)."""
        self._loop.run(self.async_group.ack())

    @property
    def cut(self) -> list[str]:
        return self.async_group.cut

    @property
    def zero_variance(self) -> bool:
        return self.async_group.zero_variance

    @property
    def partial(self) -> bool:
        return self.async_group.partial

    def advantages(
        self,
        normalize_std: bool = False,
        *,
        estimator: Estimator = "grpo",
        include_diverged: bool = True,
    ) -> list[float | None]:
        return self.async_group.advantages(
            normalize_std, estimator=estimator, include_diverged=include_diverged
        )

    @property
    def diverged(self) -> list[str]:
        return self.async_group.diverged

    def samples(self, include_diverged: bool = True) -> list[EpisodeSamples]:
        return self._loop.run(self.async_group.samples(include_diverged))
