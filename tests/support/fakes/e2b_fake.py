"""A fake of exactly the `e2b` SDK surface E2BRuntime calls, on local processes.

Faked: `AsyncSandbox.create`, `AsyncSandbox.kill` and `AsyncSandbox.get_info` (each on
an instance, and on the class with a sandbox id), `sandbox.is_running`,
`sandbox.sandbox_id`, and
`sandbox.commands.run` / `send_stdin` / `close_stdin` / `kill`; the command handle's
`pid` and `wait`. The exceptions (`CommandExitException`, `SandboxNotRunningException`,
`SandboxNotFoundException`, `TimeoutException`, `SandboxException`) and `SandboxInfo`
are the real SDK's. Signatures are checked
against the real SDK by tests/episodes/runtimes/cloud/test_sdk_fidelity.py.

Faked at the SDK's call surface, as the Modal and Prime fakes are, and kept to what
the service does behind it (E2B's control plane and envd in the sandbox):
- a command is `/bin/bash -l -c cmd` with the sandbox's env overlaid by the command's;
- its output reaches `on_stdout`/`on_stderr` as text, UTF-8 decoded with replacement
  (bytes that are not UTF-8 are lost, as they are on E2B);
- its stream is bounded by `timeout` (60 s unless given; 0 means none): past it the
  stream ends with TimeoutException and envd kills the process;
- stdin exists only when `stdin=True`; `close_stdin` is EOF;
- `wait()` raises CommandExitException for a nonzero exit, and a signalled process
  reports -1 (Go's ExitCode(), which envd passes on);
- envd's kill is SIGKILL to the pid it started, nothing else;
- the sandbox dies at its `timeout` (300 s unless given) with every process in it;
  afterwards commands raise SandboxNotRunningException, `is_running()` is False, a
  kill by id answers False and `get_info` raises SandboxNotFoundException (the API's
  404: E2B forgets a killed sandbox); a live one's `get_info` says `state` running.

Fault injection (fake-only, on `Cloud`): `create_delay_s`, `failing_infos` (the next
N `get_info`s fail as the API's 5xx does); `AsyncSandbox.simulate_death`.
"""

from __future__ import annotations

import asyncio
import codecs
import datetime
import functools
import inspect
import types
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from e2b import (
    CommandExitException,
    SandboxException,
    SandboxInfo,
    SandboxNotFoundException,
    SandboxNotRunningException,
    SandboxState,
    TimeoutException,
)
from e2b.sandbox.commands.command_handle import CommandResult

from tests.support.fakes._box import LocalBox

_CHUNK = 64 * 1024
DEFAULT_SANDBOX_TIMEOUT_S = 300
USERS = ("user", "root")


class Cloud:
    """What E2B knows: every sandbox ever created through this fake."""

    def __init__(self) -> None:
        self.sandboxes: dict[str, AsyncSandbox] = {}
        self.create_delay_s = 0.0  # fake-only: how long a create takes (after the box exists)
        self.failing_infos = 0  # fake-only: the next N get_infos fail (the API's 5xx)

    def live(self) -> list[str]:
        return [i for i, s in self.sandboxes.items() if not s._box.dead]


class _ClassOrInstance:
    """Like the SDK's `class_method_variant`: `sandbox.kill()` on an instance,
    `AsyncSandbox.kill(sandbox_id)` on the class."""

    def __init__(self, method: Callable[..., Any], on_class: str) -> None:
        self.method = method
        self.on_class = on_class

    def __get__(self, obj: Any, owner: type) -> Callable[..., Any]:
        if obj is not None:
            return functools.wraps(self.method)(functools.partial(self.method, obj))
        return getattr(owner, self.on_class)  # type: ignore[no-any-return]


class AsyncCommandHandle:
    def __init__(
        self,
        proc: asyncio.subprocess.Process,
        on_stdout: Callable[[str], Any] | None,
        on_stderr: Callable[[str], Any] | None,
        timeout: float | None,
    ) -> None:
        self._proc = proc
        self._timed_out = False
        self._pumps = [
            asyncio.ensure_future(_pump(proc.stdout, on_stdout)),
            asyncio.ensure_future(_pump(proc.stderr, on_stderr)),
        ]
        self._timer = asyncio.get_running_loop().call_later(timeout, self._cut) if timeout else None

    @property
    def pid(self) -> int:
        return self._proc.pid

    def _cut(self) -> None:
        """The command's stream reached its `timeout`: envd ends the process with it."""
        self._timed_out = True
        if self._proc.returncode is None:
            self._proc.kill()

    async def wait(self) -> CommandResult:
        code = await self._proc.wait()
        await asyncio.gather(*self._pumps)
        if self._timer is not None:
            self._timer.cancel()
        if self._timed_out:
            raise TimeoutException("context deadline exceeded: the command's timeout passed")
        exit_code = -1 if code < 0 else code
        if exit_code != 0:
            raise CommandExitException(
                stdout="", stderr="", exit_code=exit_code, error=f"exit status {exit_code}"
            )
        return CommandResult(stderr="", stdout="", exit_code=0, error=None)


async def _pump(pipe: asyncio.StreamReader | None, callback: Callable[[str], Any] | None) -> None:
    assert pipe is not None
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    while True:
        chunk = await pipe.read(_CHUNK)
        text = decoder.decode(chunk, final=not chunk)
        if text and callback is not None:
            result = callback(text)
            if inspect.isawaitable(result):
                await result
        if not chunk:
            return


class Commands:
    def __init__(self, sandbox: AsyncSandbox) -> None:
        self._sandbox = sandbox
        self._procs: dict[int, tuple[asyncio.subprocess.Process, bool]] = {}

    def _running(self) -> LocalBox:
        box = self._sandbox._box
        if box.dead:
            raise SandboxNotRunningException(
                f"The sandbox {self._sandbox.sandbox_id} was not found: it was killed, "
                "paused or reached its timeout"
            )
        return box

    async def run(
        self,
        cmd: str,
        background: bool | None = None,
        envs: dict[str, str] | None = None,
        user: str | None = None,
        cwd: str | None = None,
        on_stdout: Callable[[str], None] | Callable[[str], Awaitable[None]] | None = None,
        on_stderr: Callable[[str], None] | Callable[[str], Awaitable[None]] | None = None,
        stdin: bool | None = None,
        timeout: float | None = 60,
        request_timeout: float | None = None,
    ) -> Any:
        box = self._running()
        if user is not None and user not in USERS:
            raise SandboxException(f"user {user!r} does not exist in the sandbox")
        proc = await box.spawn(["/bin/bash", "-l", "-c", cmd], dict(envs or {}), cwd)
        assert proc.stdin is not None
        if not stdin:
            proc.stdin.close()  # envd gives the process no stdin to write to
        self._procs[proc.pid] = (proc, bool(stdin))
        handle = AsyncCommandHandle(proc, on_stdout, on_stderr, timeout or None)
        return handle if background else await handle.wait()

    def _proc(self, pid: int) -> tuple[asyncio.subprocess.Process, bool]:
        self._running()
        found = self._procs.get(pid)
        if found is None or found[0].returncode is not None:
            raise SandboxException(f"process with pid {pid} not found")
        return found

    async def send_stdin(
        self, pid: int, data: str | bytes, request_timeout: float | None = None
    ) -> None:
        proc, has_stdin = self._proc(pid)
        if not has_stdin:
            raise SandboxException("stdin is not enabled for this process")
        assert proc.stdin is not None
        if proc.stdin.is_closing():
            raise SandboxException("stdin of the process is closed")
        proc.stdin.write(data.encode() if isinstance(data, str) else data)
        try:
            await proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as e:
            raise SandboxException(f"failed to write to stdin: {e}") from e

    async def close_stdin(self, pid: int, request_timeout: float | None = None) -> None:
        proc, has_stdin = self._proc(pid)
        if not has_stdin:
            raise SandboxException("stdin is not enabled for this process")
        assert proc.stdin is not None
        proc.stdin.close()

    async def kill(self, pid: int, request_timeout: float | None = None) -> bool:
        self._running()
        found = self._procs.get(pid)
        if found is None or found[0].returncode is not None:
            return False
        found[0].kill()
        return True


class AsyncSandbox:
    cloud: Cloud

    def __init__(self, box: LocalBox, timeout: int) -> None:
        self._box = box
        self._commands = Commands(self)
        self.metadata: dict[str, str] = {}
        self.create_args: dict[str, Any] = {}  # fake-only: what create was given
        self._started = datetime.datetime.now(datetime.UTC)
        self._end = self._started + datetime.timedelta(seconds=timeout)
        self._timer = asyncio.get_running_loop().call_later(timeout, self._die)

    @property
    def sandbox_id(self) -> str:
        return self._box.id

    @property
    def commands(self) -> Commands:
        return self._commands

    @classmethod
    async def create(
        cls,
        template: str | None = None,
        timeout: int | None = None,
        metadata: dict[str, str] | None = None,
        envs: dict[str, str] | None = None,
        **opts: Any,
    ) -> AsyncSandbox:
        sandbox_id = f"i{uuid.uuid4().hex[:19]}"
        box = LocalBox(sandbox_id, dict(envs or {}), None)
        sandbox = cls(box, timeout or DEFAULT_SANDBOX_TIMEOUT_S)
        sandbox.metadata = dict(metadata or {})
        sandbox.create_args = dict(template=template or "base", timeout=timeout, envs=envs)
        cls.cloud.sandboxes[sandbox_id] = sandbox
        await asyncio.sleep(cls.cloud.create_delay_s)  # the API is still answering
        return sandbox

    async def is_running(self, request_timeout: float | None = None) -> bool:
        return not self._box.dead  # envd's health route; the proxy's 502 once it is gone

    async def _kill(self, **opts: Any) -> bool:
        return await type(self)._cls_kill(self.sandbox_id)

    @classmethod
    async def _cls_kill(cls, sandbox_id: str, **opts: Any) -> bool:
        sandbox = cls.cloud.sandboxes.get(sandbox_id)
        if sandbox is None or sandbox._box.dead:
            return False  # the API's 404
        sandbox._timer.cancel()
        await asyncio.to_thread(sandbox._box.destroy)
        return True

    kill = _ClassOrInstance(_kill, "_cls_kill")

    async def _get_info(self, **opts: Any) -> SandboxInfo:
        return await type(self)._cls_get_info(self.sandbox_id)

    @classmethod
    async def _cls_get_info(cls, sandbox_id: str, **opts: Any) -> SandboxInfo:
        cloud = cls.cloud
        if cloud.failing_infos > 0:
            cloud.failing_infos -= 1
            error = SandboxException("500: (fake) internal server error")
            error.status_code = 500  # type: ignore[attr-defined]  # as handle_api_exception sets it
            raise error
        sandbox = cloud.sandboxes.get(sandbox_id)
        if sandbox is None or sandbox._box.dead:
            raise SandboxNotFoundException(f"Sandbox {sandbox_id} not found")
        return SandboxInfo(
            sandbox_id=sandbox_id,
            sandbox_domain=None,
            template_id=sandbox.create_args.get("template", "base"),
            name=None,
            metadata=dict(sandbox.metadata),
            started_at=sandbox._started,
            end_at=sandbox._end,
            state=SandboxState.RUNNING,
            cpu_count=2,
            memory_mb=512,
            envd_version="0.2.0",
        )

    get_info = _ClassOrInstance(_get_info, "_cls_get_info")

    def _die(self) -> None:
        self._timer.cancel()
        self._box.destroy()

    # -- fake-only ----------------------------------------------------------------
    def simulate_death(self) -> None:
        """E2B ended the sandbox (timeout, a host failure). Safe from any thread."""
        self._box.destroy()


def fake_sdk(cloud: Cloud | None = None) -> types.SimpleNamespace:
    """An `e2b`-shaped namespace to pass as E2BRuntime(sdk=...)."""
    cloud = cloud or Cloud()
    return types.SimpleNamespace(
        AsyncSandbox=type("AsyncSandbox", (AsyncSandbox,), {"cloud": cloud}),
        CommandExitException=CommandExitException,
        SandboxNotFoundException=SandboxNotFoundException,
        cloud=cloud,
    )
