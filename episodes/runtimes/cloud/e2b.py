"""The E2B runtime: an E2B sandbox (a Firecracker microVM) is the box; every process
is an envd command (`sandbox.commands.run(..., background=True)`).

Only the SDK's async interface (`AsyncSandbox`) and its public calls are used. envd
signals only the pid it started, and only with SIGKILL, so processes run under the
wrapper of `remote_shell` (own process group, pid on the first stderr line) and are
signalled by a one-shot command; if that fails the sandbox is killed (fail closed).
Stdin EOF is envd's `close_stdin`. The sandbox's lifecycle (start lock, leak-proof
create, shielded stop, the ledger) is `remote_box`'s.

Two things of E2B shape the process:
- The SDK hands command output to its callbacks as text (UTF-8 decoded with
  replacement), which would corrupt the binary harness protocol. So the wrapper runs
  under BRIDGE, a stdlib Python program in the box that reads the program's stdout
  and stderr as bytes and prints them as `o<base64>` / `e<base64>` lines; `_Demux`
  turns those back into the two byte streams, apart from anything a login script of
  the template prints. The box needs a Python (`python`).
- A command is `/bin/bash -l -c cmd`: a login shell, whose /etc/profile may reset
  PATH, so a PATH the process is given (or `config.env` names) is set again in front
  of the command. The
  command's stream is bounded by `timeout` (60 s by default): harness processes pass 0.

How a sandbox ended, after a harness process did, is E2B's record (`get_info`): a
sandbox that runs is there (a process's own OOM kills that process, not the microVM);
one E2B no longer knows (killed from outside, or past its `timeout_s`: the API's 404)
or one paused is a lost box.

A process sees the sandbox's environment (`config.env`) overlaid with the `env` it is
given; nothing of the worker's environment reaches the box. The SDK is imported
lazily; tests inject a fake of exactly the calls made here through `sdk=` (see
tests/support/fakes/e2b_fake.py).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import os
import shlex
from collections.abc import AsyncIterator
from typing import Any

from episodes.errors import RuntimeUnavailable
from episodes.runtimes.cloud.remote_box import Ended, RemoteBox
from episodes.runtimes.cloud.remote_shell import CONTROL_TIMEOUT_S, WRAPPER, RemoteShellProcess
from episodes.types.runtime import E2BConfig

# argv: the program (the wrapper). Relays its stdout and stderr as tagged base64 lines
# on its own stdout; the program inherits stdin. Exits with the program's status.
BRIDGE = r"""
import base64, os, subprocess, sys, threading
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
lock = threading.Lock()
def pump(src, tag):
    while True:
        data = os.read(src.fileno(), 65536)
        if not data:
            return
        line = memoryview(tag + base64.b64encode(data) + b"\n")
        with lock:
            while line:
                line = line[os.write(1, line):]
threads = [threading.Thread(target=pump, args=(p.stdout, b"o")),
           threading.Thread(target=pump, args=(p.stderr, b"e"))]
for t in threads:
    t.start()
for t in threads:
    t.join()
rc = p.wait()
sys.exit(rc if rc >= 0 else 128 - rc)
"""


def load_e2b_sdk() -> Any:
    """The real `e2b` module, or RuntimeUnavailable with the one thing to do about it."""
    try:
        import e2b
    except ImportError:
        raise RuntimeUnavailable(
            "the e2b runtime needs the E2B SDK: pip install 'episodes[e2b]'"
        ) from None
    if not os.environ.get("E2B_API_KEY"):
        raise RuntimeUnavailable("no E2B credentials: set E2B_API_KEY")
    return e2b


def _shell(argv: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)


class _Demux:
    """BRIDGE's text lines back into stdout and stderr bytes.

    Whatever else the command prints (a template's login scripts do, on stderr or
    stdout; or the shell, when the bridge cannot start: no Python) is not the
    program's: it is kept aside, and passed on as stderr only if the bridge never
    spoke, so that an error starting it is seen."""

    NOISE_BYTES = 8192

    def __init__(self) -> None:
        self._partial = ""
        self._noise = b""
        self._spoke = False
        self._queues: dict[str, asyncio.Queue[bytes | None]] = {
            "o": asyncio.Queue(),
            "e": asyncio.Queue(),
        }

    def on_stdout(self, text: str) -> None:
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        for line in lines:
            queue = self._queues.get(line[:1])
            try:
                data = base64.b64decode(line[1:], validate=True)
            except (binascii.Error, ValueError):
                queue = None
            if queue is None:
                self._aside(line + "\n")
            else:
                self._spoke = True
                if data:
                    queue.put_nowait(data)

    def on_stderr(self, text: str) -> None:
        self._aside(text)

    def _aside(self, text: str) -> None:
        self._noise = (self._noise + text.encode())[-self.NOISE_BYTES :]

    def close(self) -> None:
        if not self._spoke and self._noise:
            self._queues["e"].put_nowait(self._noise + self._partial.encode())
        for queue in self._queues.values():
            queue.put_nowait(None)

    async def stream(self, tag: str) -> AsyncIterator[bytes]:
        queue = self._queues[tag]
        while (chunk := await queue.get()) is not None:
            yield chunk
        queue.put_nowait(None)  # a later reader ends too


class E2BProcess(RemoteShellProcess):
    def __init__(self, box: E2BRuntime, handle: Any, demux: _Demux, name: str) -> None:
        self._handle = handle
        self._commands = box.sandbox.commands
        self._demux = demux
        self._exit_exception = box.sdk_exit_exception
        super().__init__(box, name, demux.stream("o"), demux.stream("e"))

    async def _raw_write(self, data: bytes) -> None:
        await self._commands.send_stdin(self._handle.pid, data)

    async def _raw_close_stdin(self) -> None:
        await self._commands.close_stdin(self._handle.pid)

    async def _raw_wait(self) -> int:
        try:
            result = await self._handle.wait()
            return int(result.exit_code)
        except self._exit_exception as e:  # a nonzero exit is raised by the SDK
            return int(getattr(e, "exit_code"))  # noqa: B009 (the SDK's exception type)
        finally:
            self._demux.close()


class E2BRuntime(RemoteBox):
    """One E2B sandbox."""

    KIND = "e2b"
    CONFIG = E2BConfig
    config: E2BConfig
    sandbox: Any = None  # the SDK's AsyncSandbox once created
    sdk_exit_exception: type[BaseException] = Exception  # the SDK's CommandExitException

    def _load_sdk(self) -> Any:
        return load_e2b_sdk()

    async def _provision(self, sdk: Any) -> None:
        self.sdk_exit_exception = sdk.CommandExitException
        create = sdk.AsyncSandbox.create(
            template=self.config.template,
            timeout=int(self.config.timeout_s),
            metadata=dict(self.labels) or None,
            envs=dict(self.config.env) or None,
        )
        await self._create_shielded(create)  # adopts it
        code = await self.run_control('mkdir -p "$1"', [self.config.workdir])
        if code != 0:
            raise RuntimeError(f"e2b sandbox could not make its workdir {self.config.workdir}")

    def _adopt(self, created: Any) -> None:
        self.sandbox = created
        self.id = created.sandbox_id

    def _exists(self) -> bool:
        return self.sandbox is not None

    def _forget(self) -> None:
        self.sandbox, self.id = None, ""

    async def _probe(self) -> bool:
        return bool(await self.sandbox.is_running())

    async def _ended(self) -> Ended | None:
        try:
            info = await self.sandbox.get_info()
        except self.sdk.SandboxNotFoundException:
            return Ended(
                f"is gone: killed from outside, or past its timeout (timeout_s "
                f"{self.config.timeout_s:g})"
            )
        state = str(info.state)
        return None if state == "running" else Ended(f"is {state}")

    async def _exec(
        self, argv: list[str], env: dict[str, str] | None, cwd: str | None
    ) -> E2BProcess:
        demux = _Demux()
        command = (
            f"exec {shlex.quote(self.config.python)} -c {shlex.quote(BRIDGE)} "
            f"sh -c {shlex.quote(WRAPPER)} sh pipe {_shell(argv)}"
        )
        handle = await self.sandbox.commands.run(
            self._with_path(command, env),
            background=True,
            envs=env,
            cwd=cwd or self.config.workdir,
            on_stdout=demux.on_stdout,
            on_stderr=demux.on_stderr,
            stdin=True,
            timeout=0,  # the harness lives as long as its episode, not 60 s
        )
        return E2BProcess(self, handle, demux, f"e2b {self.id} {argv[0]}")

    def _with_path(self, command: str, env: dict[str, str] | None) -> str:
        """The PATH the process is given (or the sandbox's `env` names) set again in
        front of `command`: the login shell's profile has set its own."""
        path = (env or {}).get("PATH") or self.config.env.get("PATH")
        return f"PATH={shlex.quote(path)}; export PATH; {command}" if path else command

    async def run_control(self, script: str, args: list[str]) -> int:
        command = self._with_path(f"sh -c {shlex.quote(script)} sh {_shell(args)}", None)
        try:
            result = await self.sandbox.commands.run(command, timeout=CONTROL_TIMEOUT_S)
        except self.sdk_exit_exception as e:
            return int(getattr(e, "exit_code"))  # noqa: B009 (the SDK's exception type)
        return int(result.exit_code)

    async def _destroy_once(self) -> None:
        # False: already gone (404). If this fails for good, the sandbox still ends at
        # its own timeout (timeout_s).
        await self.sandbox.kill()


async def destroy_sandbox(sandbox_id: str, sdk: Any) -> None:
    """Kill a sandbox known only by its id (one a dead worker left, see `ledger`); one
    that is already gone is fine (the SDK answers False)."""
    await sdk.AsyncSandbox.kill(sandbox_id)
