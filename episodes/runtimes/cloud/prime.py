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

The VM's lifecycle (start lock, leak-proof create, shielded stop) is `remote_box`'s.
How a VM ended, after a harness process did, is its record (`get`): RUNNING is there;
OOM_KILLED (its `error_type`) went past its memory (`limit_exceeded`); TERMINATED,
TIMEOUT, ERROR, PAUSED, or a 404 is a lost box.
A process sees the VM's environment (`config.env` included) overlaid with the
`env` it is given. The SDK is imported lazily; tests inject a fake of exactly the
calls made here through `sdk=` (see tests/support/fakes/prime_fake.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import uuid
from typing import Any

from episodes.errors import RuntimeUnavailable, SpecError
from episodes.runtimes.cloud.remote_box import Ended, RemoteBox, retrying
from episodes.runtimes.cloud.remote_shell import CONTROL_TIMEOUT_S, WRAPPER, RemoteShellProcess
from episodes.types.runtime import PrimeConfig

CREATE_ATTEMPTS = 3
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


def not_found(e: BaseException) -> bool:
    """An APIError that says "no such sandbox" (the SDK's own test for it)."""
    return "HTTP 404" in str(e)


def _check(response: Any, what: str) -> None:
    if response.exit_code != 0:
        raise RuntimeError(f"prime sandbox could not {what}: {response.stderr.strip()}")


class PrimeProcess(RemoteShellProcess):
    def __init__(self, box: PrimeRuntime, proc: Any, name: str) -> None:
        self._proc = proc
        super().__init__(box, name, proc.stdout, proc.stderr)

    async def _raw_write(self, data: bytes) -> None:
        await self._proc.write_stdin(data)

    async def _raw_close_stdin(self) -> None:
        raise NotImplementedError("Prime stdin has no EOF; the wrapper's relay provides it")

    async def _raw_wait(self) -> int:
        return await self._proc.wait()

    async def release(self) -> None:
        """Free the SDK handle's stream and transport (the VM is gone or going)."""
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._proc.aclose(), _PROCESS_CLOSE_WAIT_S)


class PrimeRuntime(RemoteBox):
    """One Prime VM sandbox."""

    KIND = "prime"
    CONFIG = PrimeConfig
    config: PrimeConfig

    def __init__(self, config: PrimeConfig | None = None, **kw: Any) -> None:
        super().__init__(config, **kw)
        if not self.config.vm:
            raise SpecError(VM_REQUIRED)
        #: Sent with every create of this runtime, so retries cannot make a second VM.
        self.idempotency_key = uuid.uuid4().hex
        self.client: Any = None

    def _load_sdk(self) -> Any:
        return load_prime_sdk()

    async def _provision(self, sdk: Any) -> None:
        if self.client is None:
            self.client = sdk.AsyncSandboxClient()
        if not self.id:
            # A second start() after a failed one also reuses the key: same VM back.
            request = self._request(sdk)
            await retrying(  # each attempt adopts what it made
                lambda: self._create_shielded(self.client.create(request)),
                attempts=CREATE_ATTEMPTS,
                what="prime create (retried with the same idempotency key)",
                retry_on=sdk.APITimeoutError,
            )
        await self.client.wait_for_creation(self.id)
        _check(
            await self.client.execute_command(
                self.id, f"mkdir -p {shlex.quote(self.config.workdir)}"
            ),
            "create its workdir",
        )

    def _adopt(self, created: Any) -> None:
        self.id = created.id

    def _exists(self) -> bool:
        return bool(self.id)

    def _forget(self) -> None:
        # That key now names a deleted VM: a later start() must make a new one.
        self.id = ""
        self.idempotency_key = uuid.uuid4().hex

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

    async def _probe(self) -> bool:
        return (await self.client.get(self.id)).status == "RUNNING"

    async def _ended(self) -> Ended | None:
        try:
            vm = await self.client.get(self.id)
        except self.sdk.APIError as e:
            if not_found(e):
                return Ended("is gone (Prime answers 404)")
            raise  # a 5xx, a timeout: asked again
        if vm.status == "RUNNING":
            return None
        said = [x for x in (vm.termination_reason, vm.error_type, vm.error_message) if x]
        detail = f" ({'; '.join(dict.fromkeys(said))})" if said else ""
        if vm.error_type == "OOM_KILLED":
            return Ended(
                f"went past its memory ({self.config.memory_gb} GiB, "
                f"harness.runtime.limits.memory): Prime ended it{detail}",
                by="memory",
            )
        if vm.status == "TIMEOUT" or vm.error_type == "TIMEOUT":
            return Ended(f"reached its timeout (timeout_minutes {self.config.timeout_minutes})")
        return Ended(f"is {vm.status}{detail}")

    async def _exec(
        self, argv: list[str], env: dict[str, str] | None, cwd: str | None
    ) -> PrimeProcess:
        # The SDK runs `bash -c command`; the wrapper itself is POSIX sh.
        command = f"exec sh -c {shlex.quote(WRAPPER)} sh relay {_shell(argv)}"
        proc = await self.client.open_process(
            self.id, command, working_dir=cwd or self.config.workdir, env=env
        )
        return PrimeProcess(self, proc, f"prime {self.id} {argv[0]}")

    async def run_control(self, script: str, args: list[str]) -> int:
        command = f"sh -c {shlex.quote(script)} sh {_shell(args)}"
        response = await self.client.execute_command(
            self.id, command, timeout=int(CONTROL_TIMEOUT_S)
        )
        return response.exit_code

    async def _destroy_once(self) -> None:
        # If this fails for good, the VM still ends at its own timeout (timeout_minutes).
        await self.client.delete(self.id)

    async def _close(self) -> None:
        if self.client is not None:
            with contextlib.suppress(Exception):
                await self.client.aclose()


async def destroy_vm(sandbox_id: str, sdk: Any) -> None:
    """Delete a VM known only by its id (one a dead worker left, see `ledger`)."""
    client = sdk.AsyncSandboxClient()
    try:
        await client.delete(sandbox_id)
    except sdk.APIError as e:
        if not not_found(e):
            raise
    finally:
        with contextlib.suppress(Exception):
            await client.aclose()
