"""A box behind a cloud SDK (Modal sandbox, Prime VM): its lifecycle, apart from what runs in it.

What runs in it is `remote_shell` (the wrapper, signals, stdin). This base owns what
every such box must do the same way, so a backend is only its SDK calls:

- start() runs once under a lock. A failed or cancelled start destroys whatever it
  may have made: the create call is shielded and kept in `_creating`, so even a
  cancelled start learns the new box's id and can delete it (no box left behind).
- stop() (idempotent and shielded, see `base.Runtime.stop`) waits for a concurrent
  start to finish or clean up first.
- The processes it opened are tracked, so that destroying the box (stop, or a fail
  closed) reports them killed with it, and sweep() can end what they left behind.
- Destroying retries with backoff; if every attempt fails the box still ends at its
  platform timeout, which is why that is logged and not raised.
- When a harness process ends unexpectedly, the platform is asked how the box is
  (`_ended`): a box it terminated, preempted or timed out, one it no longer knows
  (404), or a platform that keeps answering 5xx is a lost box (`box_lost`: the episode
  fails over to a fresh box); a box that ran out of its own memory went past its limit
  (`limit_exceeded`); a box that runs is the harness's own exit (docs/failures.md).

A backend provides `KIND`, `_load_sdk`, `_provision`, `_adopt`, `_exists`, `_forget`,
`_probe`, `_ended`, `_exec`, `run_control` and `_destroy_once` (and `_close`,
optionally).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from episodes.runtimes.base import Runtime, end_processes
from episodes.runtimes.cloud import ledger
from episodes.runtimes.cloud.remote_shell import RemoteShellProcess

log = logging.getLogger(__name__)
T = TypeVar("T")

DESTROY_ATTEMPTS = 3
# How often the platform is asked how a box is after a harness process ended (a 5xx or
# a timeout is asked again, with backoff): a platform that never answers loses the box.
ASK_ATTEMPTS = 3
_CANCELLED_CREATE_WAIT_S = 60.0
_LINE_CHARS = 300


@dataclass(frozen=True)
class Ended:
    """What the platform says of a box that no longer runs."""

    #: How it ended, to follow "the <kind> box <id>": "was terminated", "is gone (404)".
    why: str
    #: Whose doing: "outside" (terminated, preempted, timed out, gone: the platform's or
    #: an operator's, a box failover); "memory" (its own memory ran out: the harness's,
    #: `limit_exceeded`); "unknown" (the platform does not say: the harness's crash).
    by: Literal["outside", "memory", "unknown"] = "outside"


def first_line(e: BaseException) -> str:
    """An error as one bounded line (an SDK's message may span a response body)."""
    text = str(e).strip()
    line = text.splitlines()[0] if text else type(e).__name__
    return line[:_LINE_CHARS]


async def retrying(
    call: Callable[[], Awaitable[T]],
    *,
    attempts: int,
    what: str,
    retry_on: type[BaseException] | tuple[type[BaseException], ...] = Exception,
) -> T:
    """`call()` up to `attempts` times with exponential backoff; the last error is raised."""
    for attempt in range(attempts):
        try:
            return await call()
        except retry_on as e:
            if attempt + 1 == attempts:
                raise
            log.warning("%s failed (%s); retrying", what, e)
            await asyncio.sleep(0.5 * 2**attempt)
    raise AssertionError("unreachable")


class RemoteBox(Runtime):
    """One cloud box; see the module docstring for what a subclass supplies."""

    KIND = "remote"  # names the backend in messages
    CONFIG: type[Any]  # the config model, whose defaults a bare constructor gets

    def __init__(
        self, config: Any = None, *, labels: dict[str, str] | None = None, sdk: Any = None
    ) -> None:
        self.config = config or self.CONFIG()
        self.labels = dict(labels or {})
        #: The SDK module (or a fake of it): given, else loaded by start().
        self.sdk = sdk
        self._local_id = uuid.uuid4().hex[:12]
        self._procs: list[RemoteShellProcess] = []
        self._creating: asyncio.Future[Any] | None = None
        self._start_lock = asyncio.Lock()
        self._ready = False
        self._destroyed = False
        self._worker = self.labels.get("worker")  # whose ledger names this box

    # -- what a backend provides ---------------------------------------------------
    @abc.abstractmethod
    def _load_sdk(self) -> Any:
        """The real SDK module, or RuntimeUnavailable saying what is missing."""

    @abc.abstractmethod
    async def _provision(self, sdk: Any) -> None:
        """Create the box (through `_create_shielded`) and make it ready to run processes."""

    @abc.abstractmethod
    def _adopt(self, created: Any) -> None:
        """Remember the box a create call returned (its handle, its id)."""

    @abc.abstractmethod
    def _exists(self) -> bool:
        """A box was created (and may need destroying)."""

    @abc.abstractmethod
    def _forget(self) -> None:
        """Drop what names a box destroyed by a failed start, so a new start makes a new one."""

    @abc.abstractmethod
    async def _probe(self) -> bool:
        """Ask the platform whether the box runs."""

    @abc.abstractmethod
    async def _ended(self) -> Ended | None:
        """The platform's word on the box: None while it runs, else how it ended.
        Raises when the platform does not answer (a 5xx, a timeout, the network)."""

    @abc.abstractmethod
    async def _exec(
        self, argv: list[str], env: dict[str, str] | None, cwd: str | None
    ) -> RemoteShellProcess:
        """Start `argv` under the `remote_shell` wrapper."""

    @abc.abstractmethod
    async def run_control(self, script: str, args: list[str]) -> int:
        """Run `sh -c script sh *args` once in the box; its exit code."""

    @abc.abstractmethod
    async def _destroy_once(self) -> None:
        """One attempt at destroying the box."""

    async def _close(self) -> None:
        """Free the SDK client, after the box is gone."""

    # -- Runtime -----------------------------------------------------------------------
    @property
    def _name(self) -> str:
        return f"{self.KIND} runtime {self.id or self._local_id}"

    async def start(self) -> None:
        async with self._start_lock:
            if self._stopped:
                raise RuntimeError(f"{self._name} was stopped")
            if self._ready:
                return
            if self.sdk is None:
                self.sdk = self._load_sdk()
            try:
                await self._provision(self.sdk)
            except BaseException:
                # Cancelled or failed once the box may exist: do not leave it behind.
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(asyncio.ensure_future(self._clean_failed_start()))
                raise
            self._ready = True

    async def _create_shielded(self, call: Awaitable[T]) -> T:
        """Await a create call that a cancelled start must not abandon midway: the box
        it may make still gets adopted and destroyed (see `_clean_failed_start`).

        The box is adopted and written to the worker's ledger in the step its create
        returns, before any await, so a worker killed after that still names it."""

        async def create_and_record() -> T:
            created = await call
            self._adopt(created)
            ledger.record(self._worker, self.KIND, self.id)
            return created

        self._creating = asyncio.ensure_future(create_and_record())
        created = await asyncio.shield(self._creating)
        self._creating = None
        return created

    async def _clean_failed_start(self) -> None:
        creating, self._creating = self._creating, None
        if creating is not None and not self._exists():
            with contextlib.suppress(BaseException):
                self._adopt(await asyncio.wait_for(creating, _CANCELLED_CREATE_WAIT_S))
        await self.destroy()
        if self._destroyed:
            self._destroyed = False
            self._forget()

    async def alive(self) -> bool:
        if not self._ready or self._stopped or self._destroyed:
            return False
        try:
            return await self._probe()
        except Exception as e:
            log.warning("%s: status check failed: %s", self._name, e)
            return False

    async def _ask_ended(self) -> Ended | None:
        return await retrying(
            self._ended, attempts=ASK_ATTEMPTS, what=f"asking how {self._name} is"
        )

    def _ours(self) -> bool:
        """Whatever became of the box, we did it (stopped, destroyed) or it never ran."""
        return not self._ready or self._stopped or self._destroyed

    async def limit_exceeded(self) -> str | None:
        """The box ran out of its own memory, as the platform says (the harness's doing)."""
        if self._ours():
            return None
        try:
            ended = await self._ended()
        except Exception:
            return None  # box_lost, asked next, asks again
        if ended is None or ended.by != "memory":
            return None
        return f"the {self.KIND} box {self.id} {ended.why}"

    async def box_lost(self) -> str | None:
        """The platform terminated, preempted or timed out the box, no longer knows it
        (404), or did not answer while asked (5xx, timeouts: `ASK_ATTEMPTS` times). None
        while the box runs (the harness's own exit), when it ran out of its own memory
        (`limit_exceeded`), or when the platform does not say why it ended."""
        if self._ours():
            return None
        try:
            ended = await self._ask_ended()
        except Exception as e:
            return f"{self.KIND} did not answer how the box {self.id} is: {first_line(e)}"
        if ended is None or ended.by != "outside":
            return None
        return f"the {self.KIND} box {self.id} {ended.why}"

    async def open_process(
        self,
        argv: list[str],
        env: dict[str, str] | None = None,
        cwd: str | None = None,
    ) -> RemoteShellProcess:
        if not self._ready or self._stopped or self._destroyed:
            raise RuntimeError(f"{self._name} is not running")
        if not argv:
            raise ValueError("argv must not be empty")
        process = await self._exec(argv, dict(env) if env else None, cwd)
        # Long-lived (pooled) boxes open many processes: forget the fully ended ones.
        self._procs = [p for p in self._procs if not p.finished]
        self._procs.append(process)
        await process.start_or_discard()
        return process

    async def sweep(self) -> bool:
        procs = list(self._procs)
        await end_processes(procs)  # a signal that cannot be sent destroys the box
        self._procs = [p for p in self._procs if not p.finished]
        return not self._destroyed and not self._procs

    async def destroy(self) -> None:
        """Destroy the box (stop, or fail closed); its processes report -9."""
        if self._destroyed or not self._exists():
            return
        self._destroyed = True
        procs, self._procs = self._procs, []
        for p in procs:
            p.abandon()
        try:
            await retrying(
                self._destroy_once, attempts=DESTROY_ATTEMPTS, what=f"destroying {self._name}"
            )
        except Exception as e:
            # Kept in the ledger: `episodes cleanup` retries once this worker is gone.
            log.warning("could not destroy %s (it ends at its own timeout): %s", self._name, e)
        else:
            ledger.forget(self._worker, self.id)
        await asyncio.gather(*(p.release() for p in procs))

    async def _teardown(self) -> None:
        async with self._start_lock:  # a concurrent start() finishes (or cleans up) first
            pass
        await self.destroy()
        await self._close()
