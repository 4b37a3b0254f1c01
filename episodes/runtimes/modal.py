"""The Modal runtime: a Modal sandbox is the box; every process is a `sandbox.exec`.

Only the SDK's async interface (`.aio`) is used. The exec API has no kill, so
processes run under the wrapper of `remote_shell` (own process group, pid on the
first stderr line) and are signalled by a second exec; if the pid does not come
within a bound or that exec fails, the sandbox is terminated (fail closed, see
`remote_shell`). Stdin EOF is the SDK's `write_eof`.

A process sees the sandbox's environment (image ENV plus `config.env`) overlaid
with the `env` it is given; nothing of the worker's environment reaches the box.

The SDK is imported lazily; tests inject a fake of exactly the calls made here
through `sdk=` (see tests/runtimes/fakes/modal_fake.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import Any

from episodes.aio import finish
from episodes.errors import RuntimeUnavailable
from episodes.runtimes.base import Runtime
from episodes.runtimes.config import ModalConfig
from episodes.runtimes.remote_shell import WRAPPER, RemoteShellProcess

log = logging.getLogger(__name__)

_TERMINATE_ATTEMPTS = 3
_CANCELLED_CREATE_WAIT_S = 60.0


def load_modal_sdk() -> Any:
    """The real `modal` module, or RuntimeUnavailable with the one thing to do about it."""
    try:
        import modal
    except ImportError:
        raise RuntimeUnavailable(
            "the modal runtime needs the Modal SDK: pip install 'episodes[modal]'"
        ) from None
    from modal.config import config

    if not (config.get("token_id") and config.get("token_secret")):
        raise RuntimeUnavailable(
            "no Modal credentials: set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET "
            "(or run `modal token new`)"
        )
    return modal


class ModalProcess(RemoteShellProcess):
    def __init__(self, runtime: ModalRuntime, proc: Any, name: str) -> None:
        self._runtime = runtime
        self._proc = proc
        super().__init__(name, aiter(proc.stdout), aiter(proc.stderr))

    async def _raw_write(self, data: bytes) -> None:
        self._proc.stdin.write(data)
        await self._proc.stdin.drain.aio()

    async def _raw_close_stdin(self) -> None:
        self._proc.stdin.write_eof()
        await self._proc.stdin.drain.aio()

    async def _raw_wait(self) -> int:
        return await self._proc.wait.aio()

    async def _run_control(self, script: str, args: list[str]) -> int:
        return await self._runtime._run_control(script, args)

    async def _fail_closed(self, reason: str) -> None:
        await self._runtime._terminate_sandbox()


class ModalRuntime(Runtime):
    """One Modal sandbox."""

    def __init__(
        self,
        config: ModalConfig | None = None,
        *,
        labels: dict[str, str] | None = None,
        sdk: Any = None,
    ) -> None:
        self.config = config or ModalConfig()
        self.labels = dict(labels or {})
        self._sdk = sdk
        self._local_id = uuid.uuid4().hex[:12]
        self.sandbox: Any = None  # the SDK's Sandbox handle once started
        self._procs: list[ModalProcess] = []
        self._start_lock = asyncio.Lock()
        self._stopped = False
        self._dead = False
        self._stop_task: asyncio.Task[None] | None = None

    @property
    def stopped(self) -> bool:
        return self._stopped

    async def start(self) -> None:
        async with self._start_lock:
            if self._stopped:
                raise RuntimeError(f"modal runtime {self.id or self._local_id} was stopped")
            if self.sandbox is not None:
                return
            sdk = self._sdk if self._sdk is not None else load_modal_sdk()
            app = await sdk.App.lookup.aio(self.config.app_name, create_if_missing=True)
            image = sdk.Image.from_registry(self.config.image)
            create = asyncio.ensure_future(
                sdk.Sandbox.create.aio(
                    app=app,
                    image=image,
                    tags=self.labels or None,
                    env=dict(self.config.env) or None,
                    timeout=self.config.timeout_s,
                    workdir=self.config.workdir,
                    cpu=self.config.cpu,
                    memory=self.config.memory_mb,
                )
            )
            try:
                sandbox = await asyncio.shield(create)
            except asyncio.CancelledError:
                # The sandbox may exist already: finish creating it, then terminate it.
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(asyncio.ensure_future(_terminate_after(create)))
                raise
            self.sandbox = sandbox
            self.id = sandbox.object_id

    async def alive(self) -> bool:
        if self.sandbox is None or self._stopped or self._dead:
            return False
        try:
            return await self.sandbox.poll.aio() is None
        except Exception as e:
            log.warning("modal sandbox %s: poll failed: %s", self.id, e)
            return False

    async def open_process(
        self,
        argv: list[str],
        env: dict[str, str] | None = None,
        cwd: str | None = None,
    ) -> ModalProcess:
        if self.sandbox is None or self._stopped or self._dead:
            raise RuntimeError(f"modal runtime {self.id or self._local_id} is not running")
        if not argv:
            raise ValueError("argv must not be empty")
        proc = await self.sandbox.exec.aio(
            *["sh", "-c", WRAPPER, "sh", "pipe", *argv],
            workdir=cwd,
            env=dict(env) if env else None,
            text=False,
        )
        process = ModalProcess(self, proc, f"modal {self.id} {argv[0]}")
        self._procs = [p for p in self._procs if p.returncode is None]
        self._procs.append(process)
        await process.start_or_discard()
        return process

    async def _run_control(self, script: str, args: list[str]) -> int:
        proc = await self.sandbox.exec.aio("sh", "-c", script, "sh", *args, text=False)
        return await proc.wait.aio()

    async def _terminate_sandbox(self) -> None:
        if self._dead:
            return
        self._dead = True
        for p in self._procs:
            p.abandon()
        for attempt in range(_TERMINATE_ATTEMPTS):
            try:
                await self.sandbox.terminate.aio()
                return
            except Exception as e:
                if attempt + 1 == _TERMINATE_ATTEMPTS:
                    # It still ends at its own timeout (config.timeout_s).
                    log.warning("could not terminate modal sandbox %s: %s", self.id, e)
                else:
                    await asyncio.sleep(0.5 * 2**attempt)

    async def stop(self) -> None:
        self._stopped = True
        if self._stop_task is None:
            self._stop_task = asyncio.ensure_future(self._stop())
        await finish(self._stop_task)

    async def _stop(self) -> None:
        async with self._start_lock:  # a concurrent start() finishes (or cleans up) first
            pass
        if self.sandbox is not None:
            await self._terminate_sandbox()


async def _terminate_after(create: asyncio.Future[Any]) -> None:
    with contextlib.suppress(BaseException):
        sandbox = await asyncio.wait_for(create, _CANCELLED_CREATE_WAIT_S)
        await sandbox.terminate.aio()
