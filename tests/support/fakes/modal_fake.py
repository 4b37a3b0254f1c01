"""A fake of exactly the `modal` SDK surface ModalRuntime calls, on local processes.

Faked: `App.lookup.aio`, `Image.from_registry`, `Sandbox.create.aio`,
`Sandbox.from_id.aio`, `sandbox.exec.aio`, `sandbox.terminate.aio`, `sandbox.poll.aio`,
`sandbox.wait.aio`, `sandbox.object_id`, `exception.NotFoundError`,
`SandboxTerminatedError`, `SandboxTimeoutError`, and on the exec's ContainerProcess:
`wait.aio`, `stdout`/`stderr` (async iteration, `read.aio`),
`stdin.write`/`write_eof`/`drain.aio`. Only the async (`.aio`) forms exist: a
blocking call from the runtime fails here instead of stalling the event loop.
Signatures are checked against the real SDK by tests/episodes/runtimes/cloud/test_sdk_fidelity.py.

Fault injection (fake-only, on `Cloud`): `create_delay_s`, `failing_polls` (the
next N polls fail as Modal's InternalError does); `Sandbox.simulate_death` (the
platform ended it: terminated, or another status).

Semantics kept from Modal: exec runs argv directly (no shell) with the sandbox's
env overlaid by the exec's; a signalled exec reports 128+n; stdin writes are
buffered until drain; a terminated sandbox kills everything in it and poll()
returns its exit code: 137 when terminated, 124 past its timeout (the SDK's
`_result_returncode`); `wait(raise_on_termination=True)` of a finished sandbox raises
SandboxTerminatedError or SandboxTimeoutError for those two, and returns for any other
end (the SDK's `raise_for_wait_result`).
"""

from __future__ import annotations

import asyncio
import functools
import os
import types
import uuid
from collections.abc import AsyncGenerator, Callable
from typing import Any

from tests.support.fakes._box import LocalBox

try:
    from modal.exception import (
        InternalError,
        InvalidError,
        NotFoundError,
        SandboxTerminatedError,
        SandboxTimeoutError,
    )
except ImportError:  # the fake works without the SDK; only fidelity needs it

    class SandboxTerminatedError(Exception):  # type: ignore[no-redef]
        pass

    class SandboxTimeoutError(TimeoutError):  # type: ignore[no-redef]
        pass

    class InternalError(Exception):  # type: ignore[no-redef]
        pass

    class InvalidError(Exception):  # type: ignore[no-redef]
        pass

    class NotFoundError(Exception):  # type: ignore[no-redef]
        pass


_CHUNK = 64 * 1024
_MAX_BUFFER = 16 * 1024 * 1024  # TASK_COMMAND_ROUTER_MAX_BUFFER_SIZE in the SDK


class _Aio:
    """Mimics synchronicity's wrapper: `obj.method.aio(...)` is the async form.

    With `on_class`, the function gets the class it was looked up on (like a
    classmethod) so that each fake_sdk() namespace talks to its own Cloud.
    """

    def __init__(self, fn: Callable[..., Any], *, on_class: bool = False) -> None:
        self._fn = fn
        self._on_class = on_class

    def __get__(self, obj: Any, owner: type) -> types.SimpleNamespace:
        if self._on_class:
            return types.SimpleNamespace(aio=functools.partial(self._fn, owner))
        if obj is None:
            return types.SimpleNamespace(aio=self._fn)
        return types.SimpleNamespace(aio=functools.partial(self._fn, obj))


class Cloud:
    """What the Modal service knows: every sandbox ever created through this fake."""

    def __init__(self) -> None:
        self.sandboxes: list[Sandbox] = []
        self.apps: dict[str, App] = {}
        self.create_delay_s = 0.0  # fake-only: how long a create takes (after the box exists)
        self.failing_polls = 0  # fake-only: the next N polls fail (the service's 5xx)

    def live(self) -> list[str]:
        return [s.object_id for s in self.sandboxes if not s._box.dead]


class App:
    cloud: Cloud

    def __init__(self, name: str) -> None:
        self.name = name

    async def _lookup(
        cls: type[App],
        name: str,
        *,
        client: Any = None,
        environment_name: str | None = None,
        create_if_missing: bool = False,
    ) -> App:
        cloud = cls.cloud
        if name not in cloud.apps:
            if not create_if_missing:
                raise LookupError(f"app {name!r} not found")
            cloud.apps[name] = App(name)
        return cloud.apps[name]

    lookup = _Aio(_lookup, on_class=True)


class Image:
    def __init__(self, tag: str) -> None:
        self.tag = tag

    @staticmethod
    def from_registry(tag: str, secret: Any = None) -> Image:
        return Image(tag)


class StreamReader:
    def __init__(self, pipe: asyncio.StreamReader, text: bool) -> None:
        self._pipe = pipe
        self._text = text

    def __aiter__(self) -> AsyncGenerator[Any, None]:
        return self._chunks()

    async def _chunks(self) -> AsyncGenerator[Any, None]:
        while chunk := await self._pipe.read(_CHUNK):
            yield chunk.decode(errors="replace") if self._text else chunk

    async def _read(self) -> Any:
        parts = [part async for part in self]
        return ("" if self._text else b"").join(parts)

    read = _Aio(_read)


class StreamWriter:
    def __init__(self, pipe: asyncio.StreamWriter) -> None:
        self._pipe = pipe
        self._buffer = bytearray()
        self._is_closed = False

    def write(self, data: bytes | bytearray | memoryview | str) -> None:
        if self._is_closed:
            raise ValueError("Stdin is closed. Cannot write to it.")
        if isinstance(data, str):
            data = data.encode("utf-8")
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"data argument must be a bytes-like object, not {type(data).__name__}")
        if len(self._buffer) + len(data) > _MAX_BUFFER:
            raise BufferError("Buffer size exceed limit. Call drain to flush the buffer.")
        self._buffer.extend(data)

    def write_eof(self) -> None:
        self._is_closed = True

    async def _drain(self) -> None:
        if self._buffer:
            self._pipe.write(bytes(self._buffer))
            await self._pipe.drain()
            self._buffer.clear()
        if self._is_closed and not self._pipe.is_closing():
            self._pipe.close()

    drain = _Aio(_drain)


class ContainerProcess:
    def __init__(self, proc: asyncio.subprocess.Process, text: bool) -> None:
        self._proc = proc
        assert proc.stdout and proc.stderr and proc.stdin
        self._stdout = StreamReader(proc.stdout, text)
        self._stderr = StreamReader(proc.stderr, text)
        self._stdin = StreamWriter(proc.stdin)

    @property
    def stdout(self) -> StreamReader:
        return self._stdout

    @property
    def stderr(self) -> StreamReader:
        return self._stderr

    @property
    def stdin(self) -> StreamWriter:
        return self._stdin

    async def _wait(self) -> int:
        code = await self._proc.wait()
        return 128 - code if code < 0 else code  # Modal: a signal n reads as 128+n

    wait = _Aio(_wait)


class Sandbox:
    cloud: Cloud

    def __init__(self, box: LocalBox, timeout: int | None) -> None:
        self._box = box
        self._exit_code: int | None = None
        # How it ended, as the SDK's GenericResult status says it: "terminated",
        # "timeout", or another ("kernel_oom_kill", "internal_failure", ...).
        self._status: str | None = None
        self.tags: dict[str, str] = {}
        self.create_args: dict[str, Any] = {}  # fake-only: what create was given
        self._timer = (
            asyncio.get_running_loop().call_later(timeout, self._die, 124, "timeout")
            if timeout
            else None
        )

    @property
    def object_id(self) -> str:
        return self._box.id

    async def _create(
        cls: type[Sandbox],
        *args: str,
        app: Any = None,
        name: str | None = None,
        tags: dict[str, str] | None = None,
        image: Any = None,
        env: dict[str, str | None] | None = None,
        timeout: int | None = 300,
        workdir: str | None = None,
        cpu: float | tuple[float, float] | None = None,
        memory: int | tuple[int, int] | None = None,
    ) -> Sandbox:
        if args:
            raise NotImplementedError("the fake runs no entrypoint command")
        if app is None:
            raise InvalidError("App is required")
        if workdir is not None and not os.path.isabs(workdir):
            raise InvalidError("workdir must be an absolute path")
        box_env = {k: v for k, v in (env or {}).items() if v is not None}
        sandbox = cls(LocalBox(f"sb-fake{uuid.uuid4().hex[:12]}", box_env, workdir), timeout)
        sandbox.tags = dict(tags or {})
        sandbox.create_args = dict(
            image=image, env=env, timeout=timeout, workdir=workdir, cpu=cpu, memory=memory
        )
        cls.cloud.sandboxes.append(sandbox)
        await asyncio.sleep(cls.cloud.create_delay_s)  # the service is still answering
        return sandbox

    create = _Aio(_create, on_class=True)

    async def _from_id(cls: type[Sandbox], sandbox_id: str, client: Any = None) -> Sandbox:
        for sandbox in cls.cloud.sandboxes:
            if sandbox.object_id == sandbox_id:
                return sandbox
        raise NotFoundError(f"Sandbox with id {sandbox_id!r} not found")

    from_id = _Aio(_from_id, on_class=True)

    async def _exec(
        self,
        *args: str,
        timeout: int | None = None,
        workdir: str | None = None,
        env: dict[str, str | None] | None = None,
        text: bool = True,
    ) -> ContainerProcess:
        if self._box.dead:
            raise SandboxTerminatedError()
        if workdir is not None and not os.path.isabs(workdir):
            raise InvalidError("workdir must be an absolute path")
        proc = await self._box.spawn(list(args), env, workdir)
        if timeout:
            asyncio.get_running_loop().call_later(timeout, _kill_quietly, proc)
        return ContainerProcess(proc, text)

    exec = _Aio(_exec)

    async def _terminate(self, *, wait: bool = False) -> int | None:
        self._die(137, "terminated")
        return self._exit_code if wait else None

    terminate = _Aio(_terminate)

    async def _poll(self) -> int | None:
        if self.cloud.failing_polls > 0:
            self.cloud.failing_polls -= 1
            raise InternalError("(fake) the Modal server answered 503")
        if self._box.dead and self._exit_code is None:
            self._exit_code = 137  # destroyed from outside
            self._status = self._status or "terminated"
        return self._exit_code

    poll = _Aio(_poll)

    async def _wait(self, raise_on_termination: bool = True) -> None:
        while await self._poll() is None:
            await asyncio.sleep(0.05)
        if self._status == "timeout":
            raise SandboxTimeoutError()
        if self._status == "terminated" and raise_on_termination:
            raise SandboxTerminatedError()

    wait = _Aio(_wait)

    def _die(self, code: int, status: str) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._exit_code is None:
            self._exit_code, self._status = code, status
        self._box.destroy()

    # -- fake-only ----------------------------------------------------------------
    def simulate_death(self, status: str = "terminated") -> None:
        """The platform ended the sandbox: terminated it (from outside: an operator, a
        preemption), or `status` (e.g. "kernel_oom_kill"). Safe from any thread."""
        self._status = status
        self._box.destroy()

    def gone(self) -> bool:
        """Every process of the sandbox is dead (a kill lands when the kernel runs it)."""
        return not self._box.members()


def _kill_quietly(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.kill()


def fake_sdk(cloud: Cloud | None = None) -> types.SimpleNamespace:
    """A `modal`-shaped namespace to pass as ModalRuntime(sdk=...)."""
    cloud = cloud or Cloud()
    return types.SimpleNamespace(
        App=type("App", (App,), {"cloud": cloud}),
        Image=Image,
        Sandbox=type("Sandbox", (Sandbox,), {"cloud": cloud}),
        exception=types.SimpleNamespace(
            NotFoundError=NotFoundError,
            SandboxTerminatedError=SandboxTerminatedError,
            SandboxTimeoutError=SandboxTimeoutError,
        ),
        cloud=cloud,
    )
