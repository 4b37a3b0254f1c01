"""An episode's box as its environment sees it: run a command, read and write files,
copy a directory in.

Coding-agent envs score the agent's work where it happened: in the box. The session
hands every env a `Box` (`Environment.box`) over the episode's runtime before
`tools()` and `reset()`; `step()` and `score()` use the same one.

Built once over the `Runtime` interface (`open_process` and nothing else), so every
backend (subprocess, sandbox, Docker, Modal, Prime) has it and the runtime self-check
(`episodes.runtimes.selfcheck.box`) holds each to it. What the box must have: `/bin/sh`
and `cat`/`mkdir` (any image with a shell; busybox will do); `copy_in` uses `tar` when
the box has it, else one write per file (and `ln -s` per link: links are copied as
links, never followed on the worker; `box_copy`).

Bounds, because the box is the agent's and what runs there is untrusted:
- every command has a timeout (`timeout_s`, default 60 s); past it the process group is
  killed and the result says `timed_out`;
- each stream keeps at most `max_output_bytes` (default 1 MiB); the rest is read and
  dropped (so the command never blocks on a full pipe) and the result says so;
- a `deadline` (set by the session while `score()` runs: `score_timeout_s`) caps every
  timeout, so a score never outlives its budget by waiting on the box.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from episodes.errors import BoxGone
from episodes.runtimes.box_copy import read_tree, tar_of

if TYPE_CHECKING:
    from episodes.runtimes.base import ByteStream, Runtime, RuntimeProcess

DEFAULT_TIMEOUT_S = 60.0
DEFAULT_MAX_OUTPUT = 1024 * 1024
# A file read back whole (read_file): bigger ones are refused, not truncated silently.
DEFAULT_MAX_FILE = 16 * 1024 * 1024
_CHUNK = 64 * 1024
# exit code of `sh` for "command not found"
_NOT_FOUND = 127


@dataclass(frozen=True)
class CommandResult:
    """What one command in the box did."""

    #: Its exit code (negative: killed by that signal); None when it timed out.
    exit_code: int | None
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    #: The stream was longer than `max_output_bytes`: what is here is its beginning.
    stdout_truncated: bool = False
    stderr_truncated: bool = False

    @property
    def ok(self) -> bool:
        """It exited with code 0."""
        return self.exit_code == 0

    def text(self, stream: str = "stdout") -> str:
        """`stdout` (or `"stderr"`) decoded as UTF-8, undecodable bytes replaced."""
        data = self.stdout if stream == "stdout" else self.stderr
        return data.decode("utf-8", errors="replace")


class Box:
    """The handle an env gets on its episode's box (see the module docstring)."""

    def __init__(
        self,
        runtime: Runtime | None,
        *,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT,
        why_none: str = "this env has no box",
    ) -> None:
        self._runtime = runtime
        self.max_output_bytes = max_output_bytes
        self._why_none = why_none
        #: time.monotonic() after which no command may run (the score's budget).
        self.deadline: float | None = None

    @property
    def runtime(self) -> Runtime:
        if self._runtime is None:
            raise BoxGone(self._why_none)
        return self._runtime

    async def alive(self) -> bool:
        return self._runtime is not None and await self._runtime.alive()

    async def sweep_orphans(self) -> bool:
        """End every process left behind in the box (a background job whose shell
        exited, a daemon), sparing the live harness, the relay and their children
        (`Runtime.sweep_orphans`); True if none is left. A verifier that reads files
        the agent could still write calls it first (the `harbor` env)."""
        return await self.runtime.sweep_orphans()

    @contextlib.contextmanager
    def deadline_in(self, seconds: float) -> Iterator[None]:
        """Within the block, every command ends at the latest `seconds` from now."""
        saved = self.deadline
        self.deadline = time.monotonic() + seconds
        try:
            yield
        finally:
            self.deadline = saved

    # -- commands --------------------------------------------------------------------------

    async def run(
        self,
        argv: Sequence[str] | str,
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        input: bytes | None = None,
        max_output_bytes: int | None = None,
    ) -> CommandResult:
        """Run `argv` (a string runs under `/bin/sh -c`) to its end or its timeout.

        Args:
            argv: The command; a bare name is looked up on the box's `PATH`.
            cwd: Where it runs. Default: the box's working directory, the one the
                harness starts in: the runtime's `workdir` (`/work` by default) on
                docker, modal and prime; on the subprocess runtime (sandboxed or not)
                a temporary directory made for this box (`episodes-<id>-...`, at the
                same path inside the sandbox), removed with it.
            env: Added to what the box itself defines, over it; nothing of the
                worker's environment goes in. On docker, modal and prime the box
                defines its image's variables (`PATH` among them) and the runtime's
                `env`; on the subprocess runtime nothing, so the command sees `env`
                alone, with `PATH=/usr/local/bin:/usr/bin:/bin` unless `env` sets one.
            timeout_s: Past it the command's process group is killed and the result
                says `timed_out` (within `score()`: never past the score's deadline).
            input: Bytes written to its stdin, which is then closed.
            max_output_bytes: What each stream keeps (default: the box's, 1 MiB).

        Returns:
            Its `CommandResult`. Raises `BoxGone` when the box is gone.
        """
        if isinstance(argv, str):
            argv = ["/bin/sh", "-c", argv]
        if not argv:
            raise ValueError("argv must not be empty")
        limit = self.max_output_bytes if max_output_bytes is None else max_output_bytes
        timeout = self._bounded(timeout_s)
        proc = await self._open(list(argv), dict(env or {}), cwd)
        try:
            out = asyncio.ensure_future(_drain(proc.stdout, limit))
            err = asyncio.ensure_future(_drain(proc.stderr, limit))

            async def feed() -> None:
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    if input:
                        await proc.write(input)
                    await proc.close_stdin()

            feeding = asyncio.ensure_future(feed())
            timed_out = False
            try:
                code: int | None = await asyncio.wait_for(proc.wait(), timeout)
            except TimeoutError:
                timed_out, code = True, None
                await proc.kill()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(proc.wait(), 10)
            feeding.cancel()
            # The streams end with the process (or its group, once killed); bounded anyway:
            # a daemon the command left holding the pipe must not hang the env.
            done, pending = await asyncio.wait([out, err], timeout=10)
            for task in pending:
                task.cancel()
            (o, o_cut), (e, e_cut) = (
                t.result() if t in done and not t.cancelled() else (b"", True) for t in (out, err)
            )
            return CommandResult(code, o, e, timed_out, o_cut, e_cut)
        finally:
            if proc.returncode is None:
                await proc.kill()

    async def _open(self, argv: list[str], env: dict[str, str], cwd: str | None) -> RuntimeProcess:
        runtime = self.runtime
        if runtime.stopped:
            raise BoxGone(f"the episode's box {runtime.id or ''} was stopped".replace("  ", " "))
        try:
            return await runtime.open_process(argv, env, cwd)
        except (RuntimeError, OSError) as e:
            if not await runtime.alive():
                raise BoxGone(f"the episode's box is gone ({e})") from None
            raise

    def _bounded(self, timeout_s: float) -> float:
        if self.deadline is None:
            return timeout_s
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the score's time (score_timeout_s) is up: no more box commands")
        return min(timeout_s, left)

    # -- files -----------------------------------------------------------------------------

    async def read_file(self, path: str, *, max_bytes: int = DEFAULT_MAX_FILE) -> bytes:
        """The whole file. FileNotFoundError if it is not there; ValueError past `max_bytes`."""
        script = 'test -f "$1" || exit 3; exec cat -- "$1"'
        r = await self.run(["/bin/sh", "-c", script, "sh", path], max_output_bytes=max_bytes)
        if r.exit_code == 3:
            raise FileNotFoundError(f"{path}: no such file in the box")
        if r.stdout_truncated:
            raise ValueError(f"{path}: larger than {max_bytes} bytes")
        if not r.ok:
            raise OSError(f"reading {path} in the box failed: {_why(r)}")
        return r.stdout

    async def write_file(self, path: str, data: bytes | str, *, mode: int | None = None) -> None:
        """Write `data` to `path` (its parent directories made), replacing any file there."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        chmod = f' && chmod {mode:o} "$1"' if mode is not None else ""
        script = f'mkdir -p -- "$(dirname -- "$1")" && cat > "$1"{chmod}'
        r = await self.run(["/bin/sh", "-c", script, "sh", path], input=data)
        if not r.ok:
            raise OSError(f"writing {path} in the box failed: {_why(r)}")

    async def copy_in(self, source: str | Path, dest: str) -> None:
        """Copy the host directory `source` to `dest` in the box (made if missing; files
        there of the same names are replaced). Modes are kept; owners are the box user's.

        Links under `source` are copied as links, never followed on the worker
        (`box_copy`): task content must not read the worker's files into the box."""
        src = Path(source)
        entries = await asyncio.to_thread(read_tree, src)
        script = 'mkdir -p -- "$1" && command -v tar >/dev/null || exit 127; exec tar -xf - -C "$1"'
        r = await self.run(["/bin/sh", "-c", script, "sh", dest], input=tar_of(entries))
        if r.ok:
            return
        if r.exit_code != _NOT_FOUND:
            raise OSError(f"copying {src} to {dest} in the box failed: {_why(r)}")
        # No tar in the box: one command per entry (parents first, so empty dirs exist).
        made = await self.run(["mkdir", "-p", "--", dest])
        if not made.ok:
            raise OSError(f"making {dest} in the box failed: {_why(made)}")
        for e in entries:
            target = f"{dest.rstrip('/')}/{e.rel}"
            if e.kind == "dir":
                made = await self.run(["mkdir", "-p", "--", target])
                if not made.ok:
                    raise OSError(f"making {target} in the box failed: {_why(made)}")
            elif e.kind == "link":
                linked = await self.run(["ln", "-sfn", "--", e.target, target])
                if not linked.ok:
                    raise OSError(f"making the link {target} in the box failed: {_why(linked)}")
            else:
                await self.write_file(target, e.data, mode=e.mode)


async def _drain(stream: ByteStream, limit: int) -> tuple[bytes, bool]:
    """Read to the end, keeping the first `limit` bytes."""
    kept = bytearray()
    cut = False
    while chunk := await stream.read(_CHUNK):
        room = limit - len(kept)
        if len(chunk) > room:
            cut = True
            kept += chunk[: max(room, 0)]
        else:
            kept += chunk
    return bytes(kept), cut


def _why(r: CommandResult) -> str:
    if r.timed_out:
        return "timed out"
    tail = r.text("stderr").strip()[-300:] or r.text().strip()[-300:]
    return f"exit {r.exit_code}" + (f": {tail}" if tail else "")
