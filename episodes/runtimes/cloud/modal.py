"""The Modal runtime: a Modal sandbox is the box; every process is a `sandbox.exec`.

Only the SDK's async interface (`.aio`) is used. The exec API has no kill, so
processes run under the wrapper of `remote_shell` (own process group, pid on the
first stderr line) and are signalled by a second exec; if the pid does not come
within a bound or that exec fails, the sandbox is terminated (fail closed, see
`remote_shell`). Stdin EOF is the SDK's `write_eof`. The sandbox's lifecycle (start
lock, leak-proof create, shielded stop) is `remote_box`'s.

How a sandbox ended, after a harness process did: `poll()` is None while it runs;
once it has finished, `wait(raise_on_termination=True)` raises SandboxTerminatedError
(terminated: from outside, or by Modal) or SandboxTimeoutError (its `timeout_s`), a
lost box either way. Any other end (its memory, Modal's eviction, a failure) is not
told apart by the SDK's public calls: it stays the harness's crash.

A process sees the sandbox's environment (image ENV plus `config.env`) overlaid
with the `env` it is given; nothing of the worker's environment reaches the box.

The SDK is imported lazily; tests inject a fake of exactly the calls made here
through `sdk=` (see tests/support/fakes/modal_fake.py).
"""

from __future__ import annotations

from typing import Any

from episodes.errors import RuntimeUnavailable
from episodes.runtimes.cloud.remote_box import Ended, RemoteBox
from episodes.runtimes.cloud.remote_shell import WRAPPER, RemoteShellProcess
from episodes.types.runtime import ModalConfig


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
    def __init__(self, box: ModalRuntime, proc: Any, name: str) -> None:
        self._proc = proc
        super().__init__(box, name, aiter(proc.stdout), aiter(proc.stderr))

    async def _raw_write(self, data: bytes) -> None:
        self._proc.stdin.write(data)
        await self._proc.stdin.drain.aio()

    async def _raw_close_stdin(self) -> None:
        self._proc.stdin.write_eof()
        await self._proc.stdin.drain.aio()

    async def _raw_wait(self) -> int:
        return await self._proc.wait.aio()


class ModalRuntime(RemoteBox):
    """One Modal sandbox."""

    KIND = "modal"
    CONFIG = ModalConfig
    config: ModalConfig
    sandbox: Any = None  # the SDK's Sandbox handle once created

    def _load_sdk(self) -> Any:
        return load_modal_sdk()

    async def _provision(self, sdk: Any) -> None:
        app = await sdk.App.lookup.aio(self.config.app_name, create_if_missing=True)
        image = sdk.Image.from_registry(self.config.image)
        create = sdk.Sandbox.create.aio(
            app=app,
            image=image,
            tags=self.labels or None,
            env=dict(self.config.env) or None,
            timeout=int(self.config.timeout_s),
            workdir=self.config.workdir,
            cpu=self.config.cpu,
            memory=self.config.memory_mb,
        )
        await self._create_shielded(create)  # adopts it

    def _adopt(self, created: Any) -> None:
        self.sandbox = created
        self.id = created.object_id

    def _exists(self) -> bool:
        return self.sandbox is not None

    def _forget(self) -> None:
        self.sandbox, self.id = None, ""

    async def _probe(self) -> bool:
        return await self.sandbox.poll.aio() is None

    async def _ended(self) -> Ended | None:
        errors = self.sdk.exception
        try:
            code = await self.sandbox.poll.aio()
        except errors.NotFoundError:
            return Ended("is gone (Modal does not know it)")
        if code is None:
            return None
        try:
            await self.sandbox.wait.aio(raise_on_termination=True)
        except errors.SandboxTimeoutError:
            return Ended(f"reached its timeout (timeout_s {self.config.timeout_s:g})")
        except errors.SandboxTerminatedError:
            return Ended("was terminated (from outside, or by Modal)")
        return Ended(f"ended with exit code {code}", by="unknown")

    async def _exec(
        self, argv: list[str], env: dict[str, str] | None, cwd: str | None
    ) -> ModalProcess:
        proc = await self.sandbox.exec.aio(
            *["sh", "-c", WRAPPER, "sh", "pipe", *argv], workdir=cwd, env=env, text=False
        )
        return ModalProcess(self, proc, f"modal {self.id} {argv[0]}")

    async def run_control(self, script: str, args: list[str]) -> int:
        proc = await self.sandbox.exec.aio("sh", "-c", script, "sh", *args, text=False)
        return await proc.wait.aio()

    async def _destroy_once(self) -> None:
        # If this fails for good, the sandbox still ends at its own timeout (timeout_s).
        await self.sandbox.terminate.aio()


async def destroy_sandbox(sandbox_id: str, sdk: Any) -> None:
    """Terminate a sandbox known only by its id (one a dead worker left, see `ledger`)."""
    try:
        sandbox = await sdk.Sandbox.from_id.aio(sandbox_id)
    except sdk.exception.NotFoundError:
        return  # already gone
    await sandbox.terminate.aio()
