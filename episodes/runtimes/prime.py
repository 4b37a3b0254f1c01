"""The Prime runtime: a Prime Intellect VM sandbox; processes via `open_process`.

Live processes exist only in VM sandboxes (`AsyncSandboxClient.open_process`), so a
`vm: false` config is rejected with what to change. Provisioning is leak-proof:
the create request carries one idempotency key per runtime (a retried create,
inside start() or a second start() after a failure, gets the same sandbox back),
the create call is shielded so a cancelled start still learns the sandbox id, and
any failure or cancellation after that deletes the sandbox.

Processes run under the wrapper of `remote_shell`: the SDK's own terminate/kill
reach only the pid it started (and report a signalled process in the daemon's
terms), so signals go to the process group through `execute_command`, and the
VM is deleted if that fails (fail closed). The VM command-session protocol has no
stdin end-of-file, so the wrapper runs in "relay" mode: close_stdin() ends a
relay process once it passed on every byte written, and the program sees EOF.

A process sees the VM's environment (`config.env` included) overlaid with the
`env` it is given. The SDK is imported lazily; tests inject a fake of exactly the
calls made here through `sdk=` (see tests/runtimes/fakes/prime_fake.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shlex
import uuid
from typing import Any

from episodes.aio import finish
from episodes.errors import RuntimeUnavailable, SpecError
from episodes.runtimes.base import Runtime
from episodes.runtimes.config import PrimeConfig
from episodes.runtimes.remote_shell import CONTROL_TIMEOUT_S, WRAPPER, RemoteShellProcess

log = logging.getLogger(__name__)

CREATE_ATTEMPTS = 3
_DELETE_ATTEMPTS = 3
_CANCELLED_CREATE_WAIT_S = 60.0
_PROCESS_CLOSE_WAIT_S = 10.0

VM_REQUIRED = (
    "runtime.prime.vm is false, but Prime container sandboxes cannot run live processes "
    "(no open_process; containers are being deprecated): set `vm: true`"
)


def load_prime_sdk() -> Any:
    """The real `prime_sandboxes` module, or RuntimeUnavailable saying what is missing."""
    try:
        import prime_sandboxes
    except ImportError:
        raise RuntimeUnavailable(
            "the prime runtime needs the Prime SDK: pip install 'episodes[prime]'"
        ) from None
    if not hasattr(prime_sandboxes.AsyncSandboxClient, "open_process"):
        raise RuntimeUnavailable("prime-sandboxes too old: need open_process (>= 0.5)")
    if not prime_sandboxes.Config().api_key:
        raise RuntimeUnavailable("no Prime credentials: set PRIME_API_KEY (or run `prime login`)")
    return prime_sandboxes


def _shell(argv: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)


def _check(response: Any, what: str) -> None:
    if response.exit_code != 0:
        raise RuntimeError(f"prime sandbox could not {what}: {response.stderr.strip()}")


class PrimeProcess(RemoteShellProcess):
    def __init__(self, runtime: PrimeRuntime, proc: Any, name: str) -> None:
        self._runtime = runtime
        self._proc = proc
        super().__init__(name, proc.stdout, proc.stderr)

    async def _raw_write(self, data: bytes) -> None:
        await self._proc.write_stdin(data)

    async def _raw_close_stdin(self) -> None:
        raise NotImplementedError("Prime stdin has no EOF; the wrapper's relay provides it")

    async def _raw_wait(self) -> int:
        return await self._proc.wait()

    async def _run_control(self, script: str, args: list[str]) -> int:
        return await self._runtime._run_control(script, args)

    async def _fail_closed(self, reason: str) -> None:
        await self._runtime._delete_sandbox()

    async def release(self) -> None:
        """Free the SDK handle's stream and transport (the VM is gone or going)."""
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._proc.aclose(), _PROCESS_CLOSE_WAIT_S)


class PrimeRuntime(Runtime):
    """One Prime VM sandbox."""

    def __init__(
        self,
        config: PrimeConfig | None = None,
        *,
        labels: dict[str, str] | None = None,
        sdk: Any = None,
    ) -> None:
        self.config = config or PrimeConfig()
        if not self.config.vm:
            raise SpecError(VM_REQUIRED)
        self.labels = dict(labels or {})
        self._sdk = sdk
        self._local_id = uuid.uuid4().hex[:12]
        #: Sent with every create of this runtime, so retries cannot make a second VM.
        self.idempotency_key = uuid.uuid4().hex
        self.client: Any = None
        self._creating: asyncio.Future[Any] | None = None
        self._procs: list[PrimeProcess] = []
        self._start_lock = asyncio.Lock()
        self._ready = False
        self._stopped = False
        self._deleted = False
        self._stop_task: asyncio.Task[None] | None = None

    @property
    def stopped(self) -> bool:
        return self._stopped

    async def start(self) -> None:
        async with self._start_lock:
            if self._stopped:
                raise RuntimeError(f"prime runtime {self.id or self._local_id} was stopped")
            if self._ready:
                return
            sdk = self._sdk if self._sdk is not None else load_prime_sdk()
            if self.client is None:
                self.client = sdk.AsyncSandboxClient()
            try:
                if not self.id:
                    self.id = await self._create(sdk)
                await self.client.wait_for_creation(self.id)
                _check(
                    await self.client.execute_command(
                        self.id, f"mkdir -p {shlex.quote(self.config.workdir)}"
                    ),
                    "create its workdir",
                )
            except BaseException:
                # Cancelled or failed once the VM may exist: do not leave it behind.
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(asyncio.ensure_future(self._clean_failed_start()))
                raise
            self._ready = True

    async def _clean_failed_start(self) -> None:
        creating, self._creating = self._creating, None
        if creating is not None and not self.id:
            with contextlib.suppress(BaseException):
                self.id = (await asyncio.wait_for(creating, _CANCELLED_CREATE_WAIT_S)).id
        await self._delete_sandbox()
        if self._deleted:
            # That key now names a deleted VM: a later start() must make a new one.
            self.id, self._deleted = "", False
            self.idempotency_key = uuid.uuid4().hex

    async def _create(self, sdk: Any) -> str:
        request = self._request(sdk)
        for attempt in range(CREATE_ATTEMPTS):
            # Shielded: if start() is cancelled, the VM this call may create still gets
            # an id we can delete (see _clean_failed_start).
            self._creating = asyncio.ensure_future(self.client.create(request))
            try:
                sandbox = await asyncio.shield(self._creating)
            except sdk.APITimeoutError as e:
                if attempt + 1 == CREATE_ATTEMPTS:
                    raise
                log.warning("prime create timed out (%s); retrying with the same key", e)
                await asyncio.sleep(0.5 * 2**attempt)
                continue
            self._creating = None
            return sandbox.id
        raise AssertionError("unreachable")

    def _request(self, sdk: Any) -> Any:
        fields: dict[str, Any] = dict(
            name=f"episodes-{self._local_id}",
            docker_image=self.config.docker_image,
            cpu_cores=self.config.cpu_cores,
            memory_gb=self.config.memory_gb,
            disk_size_gb=self.config.disk_size_gb,
            timeout_minutes=self.config.timeout_minutes,
            environment_vars=dict(self.config.env) or None,
            labels=[f"{k}={v}" for k, v in sorted(self.labels.items())],
            idempotency_key=self.idempotency_key,
        )
        # prime-sandboxes 0.5 has no `vm` field (VM is its only runtime, sent always).
        if "vm" in sdk.CreateSandboxRequest.model_fields:
            fields["vm"] = True
        return sdk.CreateSandboxRequest(**fields)

    async def alive(self) -> bool:
        if not self._ready or self._stopped or self._deleted:
            return False
        try:
            sandbox = await self.client.get(self.id)
        except Exception as e:
            log.warning("prime sandbox %s: status check failed: %s", self.id, e)
            return False
        return sandbox.status == "RUNNING"

    async def open_process(
        self,
        argv: list[str],
        env: dict[str, str] | None = None,
        cwd: str | None = None,
    ) -> PrimeProcess:
        if not self._ready or self._stopped or self._deleted:
            raise RuntimeError(f"prime runtime {self.id or self._local_id} is not running")
        if not argv:
            raise ValueError("argv must not be empty")
        # The SDK runs `bash -c command`; the wrapper itself is POSIX sh.
        command = f"exec sh -c {shlex.quote(WRAPPER)} sh relay {_shell(argv)}"
        proc = await self.client.open_process(
            self.id, command, working_dir=cwd or self.config.workdir, env=dict(env) if env else None
        )
        process = PrimeProcess(self, proc, f"prime {self.id} {argv[0]}")
        self._procs = [p for p in self._procs if p.returncode is None]
        self._procs.append(process)
        await process.start_or_discard()
        return process

    async def _run_control(self, script: str, args: list[str]) -> int:
        command = f"sh -c {shlex.quote(script)} sh {_shell(args)}"
        response = await self.client.execute_command(
            self.id, command, timeout=int(CONTROL_TIMEOUT_S)
        )
        return response.exit_code

    async def _delete_sandbox(self) -> None:
        if self._deleted or not self.id:
            return
        self._deleted = True
        procs, self._procs = self._procs, []
        for p in procs:
            p.abandon()
        for attempt in range(_DELETE_ATTEMPTS):
            try:
                await self.client.delete(self.id)
                break
            except Exception as e:
                if attempt + 1 == _DELETE_ATTEMPTS:
                    # The VM still ends at its own timeout (config.timeout_minutes).
                    log.warning("could not delete prime sandbox %s: %s", self.id, e)
                else:
                    await asyncio.sleep(0.5 * 2**attempt)
        await asyncio.gather(*(p.release() for p in procs))

    async def stop(self) -> None:
        self._stopped = True
        if self._stop_task is None:
            self._stop_task = asyncio.ensure_future(self._stop())
        await finish(self._stop_task)

    async def _stop(self) -> None:
        async with self._start_lock:  # a concurrent start() finishes (or cleans up) first
            pass
        await self._delete_sandbox()
        if self.client is not None:
            with contextlib.suppress(Exception):
                await self.client.aclose()
