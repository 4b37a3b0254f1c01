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
