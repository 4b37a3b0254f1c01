"""`run_batch`'s options are one `BatchOptions` (issue: one list, seven copies): the
same keyword arguments as before, or `options=`, and the blocking client forwards the
one object it built to the async client."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from episodes.client import EpisodesClient
from episodes.client.batch.options import BatchOptions
from episodes.client.blocking.client import SyncEpisodesClient
from episodes.client.blocking.session import LoopThread
from episodes.types.priority import BatchBudget
from tests.support.helpers import spec

QUEUE = "episodes-test"

# run_batch's keyword arguments as they were written before BatchOptions: all still taken.
KEYWORDS = {
    "concurrency",
    "batch_id",
    "groups",
    "policy_version",
    "max_staleness",
    "priority",
    "fairness_key",
    "fairness_weight",
    "budget",
    "oversample",
    "skip_zero_variance",
    "batch",
    "execution",
    "on_stale",  # added with it (issue 41): None is `keep`
}


def test_the_options_are_run_batchs_keyword_arguments_with_their_defaults() -> None:
    fields = {f.name: f.default for f in dataclasses.fields(BatchOptions)}
    assert set(fields) == KEYWORDS
    assert fields["groups"] is False
    assert all(v is None for k, v in fields.items() if k != "groups")


def test_keyword_arguments_replace_the_options_fields() -> None:
    base = BatchOptions(concurrency=2, priority=1)
    got = BatchOptions.of(base, {"priority": 3, "groups": True}, where="run_batch")
    assert (got.concurrency, got.priority, got.groups) == (2, 3, True)
    assert base.priority == 1  # frozen: the caller's object is left as it was
    assert BatchOptions.of(None, {}, where="run_batch") == BatchOptions()


def test_an_unknown_keyword_is_a_type_error() -> None:
    with pytest.raises(TypeError, match=r"run_batch.*'concurency'"):
        BatchOptions.of(None, {"concurency": 2}, where="run_batch")


def test_the_old_batch_spelling_becomes_batch_id_with_a_warning() -> None:
    with pytest.warns(DeprecationWarning, match=r"run_batch\(batch=...\) is deprecated"):
        got = BatchOptions.of(BatchOptions(batch="old"), {}, where="run_batch")
    assert (got.batch_id, got.batch) == ("old", None)


class _Recorder:
    """The async client's `run_batch`, recording what the blocking client forwards."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, dict[str, Any]]] = []

    def run_batch(self, spec: Any, **kwargs: Any) -> AsyncGenerator[Any, None]:
        self.calls.append((spec, kwargs))

        async def nothing() -> AsyncGenerator[Any, None]:
            return
            yield

        return nothing()


def test_the_blocking_client_forwards_one_options_object() -> None:
    loop = LoopThread()
    try:
        recorder = _Recorder()
        sync = SyncEpisodesClient(loop, recorder)  # type: ignore[arg-type]
        budget = BatchBudget(max_model_calls=3)
        assert list(sync.run_batch("s.yaml", concurrency=4, budget=budget)) == []
        opts = BatchOptions(groups=True, priority=2)
        assert list(sync.run_batch("s.yaml", options=opts, batch_id="b")) == []
        with pytest.warns(DeprecationWarning, match=r"run_batch\(batch=...\)"):
            assert list(sync.run_batch("s.yaml", batch="old")) == []
    finally:
        loop.stop()
    [(_, first), (_, second), (_, third)] = recorder.calls
    assert first == {"options": BatchOptions(concurrency=4, budget=budget)}
    assert second == {"options": BatchOptions(groups=True, priority=2, batch_id="b")}
    assert third == {"options": BatchOptions(batch_id="old")}


async def test_run_batch_takes_options_and_keyword_arguments_over_them(client, worker) -> None:
    s = spec(name=f"opts-{uuid.uuid4().hex[:6]}")
    ec = EpisodesClient(client, task_queue=QUEUE)
    opts = BatchOptions(batch_id=f"{s.name}-a", concurrency=1)
    [r] = [r async for r in ec.run_batch(s, options=opts)]
    assert r.workflow_id == f"{s.name}-a.t0.s0"
    [r] = [r async for r in ec.run_batch(s, options=opts, batch_id=f"{s.name}-b")]
    assert r.workflow_id == f"{s.name}-b.t0.s0"
    [g] = [g async for g in ec.run_batch(s, options=BatchOptions(groups=True))]
    assert g.group_id == f"{s.name}/t0"
