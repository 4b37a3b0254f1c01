"""A drive that ends while its recorder's Update had failed leaves no unretrieved
task exception behind ("Task exception was never retrieved" in the worker's log)."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

from activities.recorder import TurnRecorder
from episodes.types.results import StepOutcome, TurnRecord, TurnResult


class _RefusingHandle:
    """A workflow handle whose server refuses every Update (the workflow is gone)."""

    async def execute_update(self, *args: Any, **kwargs: Any) -> bool:
        raise RuntimeError("the workflow is gone")


async def test_close_after_a_failed_update_leaves_no_unretrieved_exception() -> None:
    loop = asyncio.get_running_loop()
    seen: list[dict[str, Any]] = []
    old = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: seen.append(context))
    try:
        recorder = TurnRecorder(_RefusingHandle(), "s1", max_update_bytes=1 << 16)  # type: ignore[arg-type]
        recorder.add(TurnResult(record=TurnRecord(turn=0), observation=StepOutcome()))
        sender = recorder._sender
        assert sender is not None
        await asyncio.wait({sender})
        assert sender.done() and not sender.cancelled()  # failed; nobody looked yet
        recorder.close()  # the drive was cancelled: it never awaits finish()
        del recorder, sender
        gc.collect()
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(old)
    assert [c for c in seen if "never retrieved" in str(c.get("message"))] == []


class _SlowHandle:
    """A handle whose Update call turns its cancellation into an error of its own, as
    the SDK does (WorkflowUpdateRPCTimeoutOrCancelledError)."""

    async def execute_update(self, *args: Any, **kwargs: Any) -> bool:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            raise RuntimeError("Timeout or cancellation waiting for update") from None
        return True


async def test_close_during_an_update_leaves_no_unretrieved_exception() -> None:
    loop = asyncio.get_running_loop()
    seen: list[dict[str, Any]] = []
    old = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: seen.append(context))
    try:
        recorder = TurnRecorder(_SlowHandle(), "s1", max_update_bytes=1 << 16)  # type: ignore[arg-type]
        recorder.add(TurnResult(record=TurnRecord(turn=0), observation=StepOutcome()))
        sender = recorder._sender
        assert sender is not None
        await asyncio.sleep(0.01)  # the Update is in flight
        recorder.close()  # the drive was cancelled
        await asyncio.wait({sender})
        assert not sender.cancelled()  # it ended with the SDK's error, not as cancelled
        del recorder, sender
        gc.collect()
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(old)
    assert [c for c in seen if "never retrieved" in str(c.get("message"))] == []
