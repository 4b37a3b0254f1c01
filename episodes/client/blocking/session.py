"""The blocking client's event loop thread and its interactive session (`LoopThread`,
`SyncInteractiveSession`; `episodes.client.blocking.client` re-exports the session)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from episodes.client.interactive import InteractiveSession
from episodes.types.io import EpisodeProgress, StepReply
from episodes.types.results import EpisodeResult, Termination

T = TypeVar("T")


class LoopThread:
    """An event loop running forever in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="episodes-sync", daemon=True
        )
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        if not self._thread.is_alive():
            coro.close()
            raise RuntimeError("this SyncEpisodesClient is closed")
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result()
        except BaseException:
            # Ctrl-C in the caller: do not leave the coroutine running on its own.
            future.cancel()
            raise

    @property
    def closed(self) -> bool:
        return not self._thread.is_alive()

    def stop(self) -> None:
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join()
        if not self.loop.is_closed():
            self.loop.close()


class SyncInteractiveSession:
    """`InteractiveSession` with blocking `step`, `close`, `park` and `resume`."""

    def __init__(self, loop: LoopThread, session: InteractiveSession) -> None:
        self._loop = loop
        self.async_session = session

    @property
    def workflow_id(self) -> str:
        return self.async_session.workflow_id

    @property
    def first_observation(self) -> Any:
        return self.async_session.first_observation

    @property
    def done(self) -> bool:
        return self.async_session.done

    @property
    def turn(self) -> int:
        return self.async_session.turn

    @property
    def termination(self) -> Termination | None:
        return self.async_session.termination

    @property
    def result(self) -> EpisodeResult | None:
        return self.async_session.result

    def step(self, message: Any, *, idempotency_key: str | None = None) -> StepReply:
        return self._loop.run(self.async_session.step(message, idempotency_key=idempotency_key))

    def recorded(self, n: int) -> StepReply | None:
        """Step `n`'s reply as recorded (see `InteractiveSession.recorded`)."""
        return self._loop.run(self.async_session.recorded(n))

    def close(self) -> EpisodeResult:
        return self._loop.run(self.async_session.close())

    def park(self) -> None:
        """Park the session between two steps (see `InteractiveSession.park`)."""
        self._loop.run(self.async_session.park())

    def resume(self) -> None:
        """Resume a parked session now (see `InteractiveSession.resume`)."""
        self._loop.run(self.async_session.resume())

    def progress(self, *, since: int | None = None, last: int | None = None) -> EpisodeProgress:
        return self._loop.run(self.async_session.progress(since=since, last=last))

    def __enter__(self) -> SyncInteractiveSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
