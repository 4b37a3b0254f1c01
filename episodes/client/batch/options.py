"""How to run a batch: `run_batch`'s options, written once.

    opts = BatchOptions(concurrency=8, groups=True, priority=1)
    async for group in client.run_batch(spec, options=opts):
        ...

`EpisodesClient.run_batch(spec, **kwargs)` takes these same names as keyword
arguments (each is a field here), `SyncEpisodesClient.run_batch` too, and forwards
one `BatchOptions` to the async client. Keyword arguments given beside `options=`
replace its fields. None: the spec's own value (its `concurrency`, `execution`, ...).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from episodes.client.group.staleness import OnStale
from episodes.errors import EpisodesError
from episodes.types.priority import BatchBudget
from episodes.types.spec import Execution


class BatchKeywords(TypedDict, total=False):
    """`BatchOptions`' fields but `groups`, as `run_batch`'s typed keyword arguments
    (`**kwargs: Unpack[BatchKeywords]`): a misspelt keyword is a type checker's error,
    not only a `TypeError` at run time. `groups` is a parameter of its own (its value
    chooses what the stream yields). tests/episodes/client/test_batch_keywords.py keeps
    the two lists equal."""

    concurrency: int | None
    batch_id: str | None
    policy_version: int | None
    max_staleness: int | None
    on_stale: OnStale | None
    priority: int | None
    fairness_key: str | None
    fairness_weight: float | None
    budget: BatchBudget | None
    oversample: int | None
    skip_zero_variance: bool | None
    batch: str | None
    execution: Execution | None


@dataclass(frozen=True, kw_only=True)
class BatchOptions:
    """`run_batch`'s options (see `EpisodesClient.run_batch` for what each does)."""

    concurrency: int | None = None
    """At most this many episodes in flight (None: the spec's `concurrency`)."""
    batch_id: str | None = None
    """The batch's id, in every workflow id (None: the spec's name); the same id again
    re-attaches to the batch's episodes."""
    groups: bool = False
    """Yield each task's samples as one `Group` once all ended."""
    policy_version: int | None = None
    """Set the client's `policy_version` now (every episode is dispatched at the
    client's version as it is then)."""
    max_staleness: int | None = None
    """Groups only: how many versions a running group may trail the client's
    (`episodes.client.group.staleness`)."""
    on_stale: OnStale | None = None
    """Groups with `max_staleness`: `"keep"` (None: the default) paces admission and
    cancels nothing; `"requeue"` cancels a stale group and dispatches it again at the
    current version."""
    priority: int | None = None
    """1 (first) to 5 (last), in place of the spec's."""
    fairness_key: str | None = None
    """The fairness key, in place of the spec's."""
    fairness_weight: float | None = None
    """The fairness key's weight, in place of the spec's."""
    budget: BatchBudget | None = None
    """Each limit given replaces the spec's budget's."""
    oversample: int | None = None
    """Groups only: spare members a group runs, in place of the spec's."""
    skip_zero_variance: bool | None = None
    """Groups only: do not yield a group whose members all scored the same."""
    batch: str | None = None
    """Deprecated spelling of `batch_id` (a DeprecationWarning says so)."""
    execution: Execution | None = None
    """`"group"`: a task's samples run as one workflow (None: the spec's)."""

    @classmethod
    def of(
        cls, options: BatchOptions | None, given: Mapping[str, Any], *, where: str
    ) -> BatchOptions:
        """`options` (or the defaults) with the keyword arguments `given` over them, the
        deprecated `batch=` folded into `batch_id` (the warning names the caller of
        `where`, the method that called this)."""
        unknown = sorted(set(given) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise TypeError(f"{where}() got an unexpected keyword argument {unknown[0]!r}")
        opts = dataclasses.replace(options or cls(), **given)
        if opts.batch is None:
            return opts
        batch_id = batch_id_arg(opts.batch_id, opts.batch, where, stacklevel=4)
        return dataclasses.replace(opts, batch_id=batch_id, batch=None)


def batch_id_arg(
    batch_id: str | None, batch: str | None, where: str, *, stacklevel: int = 3
) -> str | None:
    """`batch_id=`, or the deprecated `batch=` spelling of it (a warning says so, at the
    caller of the caller by default: the user's line)."""
    if batch is None:
        return batch_id
    if batch_id is not None and batch_id != batch:
        raise EpisodesError(f"{where}: batch_id={batch_id!r} and batch={batch!r}: give one")
    warnings.warn(
        f"{where}(batch=...) is deprecated: use batch_id=... (the batch id; the same "
        "word as `episodes run --batch-id`)",
        DeprecationWarning,
        stacklevel=stacklevel,
    )
    return batch
