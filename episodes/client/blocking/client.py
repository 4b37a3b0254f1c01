"""A blocking facade over `EpisodesClient`, for trainers that are not async.

    with SyncEpisodesClient.connect("127.0.0.1:7233") as client:
        for result in client.run_batch("examples/guess-number.yaml"):
            print(result.task_id, result.reward)

        with client.open_session(spec, task) as session:
            reply = session.step("hello")

The async client runs on a private event loop in a daemon thread; every method
submits a coroutine there and waits for it. Same pydantic models in and out.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Generator, Iterator
from pathlib import Path
from typing import Any, Literal, TypeVar, cast, overload

from temporalio.client import WorkflowHandle
from temporalio.converter import DataConverter
from typing_extensions import Unpack

from episodes.client.batch.options import BatchKeywords, BatchOptions, batch_id_arg
from episodes.client.batch.parking import ParkReport
from episodes.client.blocking.group import SyncGroup
from episodes.client.blocking.session import LoopThread, SyncInteractiveSession
from episodes.client.core import EpisodesClient
from episodes.client.group.receipts import ReceiptsStatus
from episodes.client.group.stream import Group
from episodes.types.model import UpstreamSpec
from episodes.types.priority import BudgetName
from episodes.types.results import EpisodeResult, Task, Transcript
from episodes.types.spec import EpisodeSpec
from episodes.types.tuning import DEFAULT_IDLE_TIMEOUT_S, DEFAULT_TURNS_PER_RUN

T = TypeVar("T")
_END = object()
__all__ = ["SyncEpisodesClient", "SyncGroup", "SyncInteractiveSession"]


class SyncEpisodesClient:
    """`EpisodesClient` with blocking methods. Close it (or use `with`) when done."""

    def __init__(self, loop: LoopThread, client: EpisodesClient) -> None:
        self._loop = loop
        self.async_client = client

    @classmethod
    def connect(
        cls,
        address: str | None = None,
        *,
        namespace: str | None = None,
        api_key: str | None = None,
        tls: bool | None = None,
        profile: str | None = None,
        config_file: str | Path | None = None,
        task_queue: str | None = None,
        data_converter: DataConverter | None = None,
        timeout_s: float = 10.0,
    ) -> SyncEpisodesClient:
        """As `EpisodesClient.connect`: arguments > environment > profile > defaults."""
        loop = LoopThread()
        try:
            client = loop.run(
                EpisodesClient.connect(
                    address,
                    namespace=namespace,
                    api_key=api_key,
                    tls=tls,
                    profile=profile,
                    config_file=config_file,
                    task_queue=task_queue,
                    data_converter=data_converter,
                    timeout_s=timeout_s,
                )
            )
        except BaseException:
            loop.stop()
            raise
        return cls(loop, client)

    def start_episode(
        self,
        spec: EpisodeSpec,
        task: Task,
        sample: int = 0,
        *,
        batch_id: str | None = None,
        attempt: int = 0,
        batch: str | None = None,
    ) -> str:
        """Start one episode (or attach to the one under its id) without waiting for it;
        the workflow id, for `transcript()` or the UI."""
        batch_id = batch_id_arg(batch_id, batch, "start_episode")
        handle = self._loop.run(
            self.async_client.start_episode(spec, task, sample, batch_id=batch_id, attempt=attempt)
        )
        return handle.id

    def run_episode(
        self,
        spec: EpisodeSpec,
        task: Task,
        sample: int = 0,
        *,
        batch_id: str | None = None,
        batch: str | None = None,
    ) -> EpisodeResult:
        batch_id = batch_id_arg(batch_id, batch, "run_episode")
        return self._loop.run(self.async_client.run_episode(spec, task, sample, batch_id=batch_id))

    @property
    def policy_version(self) -> int | None:
        """The policy version episodes are dispatched at (`run_batch`); set it to move on."""
        return self.async_client.policy_version

    @policy_version.setter
    def policy_version(self, version: int | None) -> None:
        self.async_client.policy_version = version

    @property
    def budget_exhausted(self) -> BudgetName | None:
        """The budget the last `run_batch` stream reached, if any."""
        return self.async_client.budget_exhausted

    @property
    def zero_variance_skipped(self) -> int:
        """Groups the last groups stream did not yield (`skip_zero_variance`)."""
        return self.async_client.zero_variance_skipped

    @property
    def groups_dropped(self) -> int:
        """Groups the last groups stream dropped at `group_timeout_s` (`group_on_timeout:
        drop`), not yielded either."""
        return self.async_client.groups_dropped

    @property
    def episodes_ran(self) -> int:
        """Episodes the last stream saw end, yielded or not (a skipped or dropped
        group's members too; stragglers cut are not counted)."""
        return self.async_client.episodes_ran

    @property
    def upstreams(self) -> list[UpstreamSpec] | None:
        """The fleet episodes are dispatched to (`run_batch`; None: the spec's)."""
        return self.async_client.upstreams

    @upstreams.setter
    def upstreams(self, upstreams: list[UpstreamSpec] | None) -> None:
        self.async_client.upstreams = upstreams

    @overload
    def run_batch(
        self,
        spec: EpisodeSpec | str | Path,
        *,
        options: None = None,
        groups: Literal[False] = False,
        **kwargs: Unpack[BatchKeywords],
    ) -> Iterator[EpisodeResult]: ...

    @overload
    def run_batch(
        self,
        spec: EpisodeSpec | str | Path,
        *,
        options: None = None,
        groups: Literal[True],
        **kwargs: Unpack[BatchKeywords],
    ) -> Iterator[SyncGroup]: ...

    @overload
    def run_batch(
        self,
        spec: EpisodeSpec | str | Path,
        *,
        options: BatchOptions,
        groups: bool = ...,
        **kwargs: Unpack[BatchKeywords],
    ) -> Iterator[EpisodeResult] | Iterator[SyncGroup]: ...

    def run_batch(
        self,
        spec: EpisodeSpec | str | Path,
        *,
        options: BatchOptions | None = None,
        **kwargs: Any,
    ) -> Iterator[EpisodeResult] | Iterator[SyncGroup]:
        """Results as each episode finishes, or with `groups` each task's samples as a
        `SyncGroup` once all ended (see `EpisodesClient.run_batch`: the same options,
        `BatchOptions`' fields as keyword arguments or `options=`). Closing the iterator
        early (`break`, an exception, `.close()`) cancels the episodes it still waits for."""
        o = BatchOptions.of(options, kwargs, where="run_batch")
        stream = self.async_client.run_batch(spec, options=o)
        if o.groups:
            return self._groups(cast(AsyncGenerator[Group, None], stream))
        return self._iterate(cast(AsyncGenerator[EpisodeResult, None], stream))

    def _groups(self, agen: AsyncGenerator[Group, None]) -> Iterator[SyncGroup]:
        inner = self._iterate(agen)
        try:
            for group in inner:
                yield SyncGroup(self._loop, group)
        finally:
            inner.close()  # now, not when collected: it cancels the episodes left

    def _iterate(self, agen: AsyncGenerator[T, None]) -> Generator[T, None, None]:
        async def next_item() -> Any:
            try:
                return await agen.__anext__()
            except StopAsyncIteration:
                return _END

        try:
            while (item := self._loop.run(next_item())) is not _END:
                yield item
        finally:
            if not self._loop.closed:
                self._loop.run(agen.aclose())

    def fork(
        self,
        workflow_id: str,
        *,
        at_turn: int,
        samples: int = 1,
        policy_version: int | None = None,
    ) -> list[WorkflowHandle[object, EpisodeResult]]:
        """Branches of an episode that replay its first `at_turn` turns exactly (see
        `EpisodesClient.fork`)."""
        return self._loop.run(
            self.async_client.fork(
                workflow_id, at_turn=at_turn, samples=samples, policy_version=policy_version
            )
        )

    def fork_group(
        self,
        workflow_id: str,
        *,
        at_turn: int,
        samples: int = 1,
        policy_version: int | None = None,
    ) -> SyncGroup:
        """The branches of a fork as one group, once all ended (see
        `EpisodesClient.fork_group`)."""
        group = self._loop.run(
            self.async_client.fork_group(
                workflow_id, at_turn=at_turn, samples=samples, policy_version=policy_version
            )
        )
        return SyncGroup(self._loop, group)

    def park(self, workflow_id: str) -> None:
        """Park a running episode at its next turn boundary (see `EpisodesClient.park`)."""
        self._loop.run(self.async_client.park(workflow_id))

    def resume(self, workflow_id: str) -> None:
        """Resume a parked episode (see `EpisodesClient.resume`)."""
        self._loop.run(self.async_client.resume(workflow_id))

    def park_batch(self, batch_id: str) -> ParkReport:
        """Park every running episode of the batch (see `EpisodesClient.park_batch`)."""
        return self._loop.run(self.async_client.park_batch(batch_id))

    def resume_batch(self, batch_id: str) -> list[str]:
        """Resume the batch's parked episodes (see `EpisodesClient.resume_batch`)."""
        return self._loop.run(self.async_client.resume_batch(batch_id))

    def ack(self, group: SyncGroup) -> None:
        """Record on the server that the trainer consumed `group` (see
        `EpisodesClient.ack`): the same batch run again never yields it again."""
        group.ack()

    def batch_status(self, batch_id: str) -> ReceiptsStatus:
        """The batch's groups acknowledged, outstanding and running (see
        `EpisodesClient.batch_status`)."""
        return self._loop.run(self.async_client.batch_status(batch_id))

    def transcript(self, workflow_id: str) -> Transcript:
        """A finished (or running) episode's transcript, every run of it."""
        return self._loop.run(self.async_client.transcript(workflow_id))

    def open_session(
        self,
        spec: EpisodeSpec,
        task: Task,
        sample: int = 0,
        *,
        batch_id: str | None = None,
        idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
        workflow_id: str | None = None,
        turns_per_run: int = DEFAULT_TURNS_PER_RUN,
        batch: str | None = None,
    ) -> SyncInteractiveSession:
        session = self._loop.run(
            self.async_client.open_session(
                spec,
                task,
                sample,
                batch_id=batch_id,
                idle_timeout_s=idle_timeout_s,
                workflow_id=workflow_id,
                turns_per_run=turns_per_run,
                batch=batch,
            )
        )
        return SyncInteractiveSession(self._loop, session)

    def attach_session(self, workflow_id: str) -> SyncInteractiveSession | None:
        """Re-attach to a running interactive session by id, starting none (None: no
        such workflow; see `EpisodesClient.attach_session`)."""
        session = self._loop.run(self.async_client.attach_session(workflow_id))
        return None if session is None else SyncInteractiveSession(self._loop, session)

    def close(self) -> None:
        self._loop.stop()

    def __enter__(self) -> SyncEpisodesClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
