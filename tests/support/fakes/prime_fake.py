"""A fake of exactly the `prime_sandboxes` surface PrimeRuntime calls, on local processes.

Faked: `AsyncSandboxClient()` and its `create`, `wait_for_creation`, `get`,
`open_process`, `execute_command`, `delete`, `aclose`; the process handle's
`stdout`/`stderr` (async chunk iterators), `pid`, `returncode`, `write_stdin`,
`wait`, `terminate`, `kill`, `aclose`. The request/response models
(`CreateSandboxRequest`, `Sandbox`, `CommandResponse`) and errors are the real
SDK's. Signatures are checked against the real SDK by test_sdk_fidelity.py.

Semantics kept from Prime: commands run as `/bin/bash -c command`; the create
idempotency key returns the sandbox it made before; a sandbox is usable once
`wait_for_creation` saw it RUNNING; stdin has no EOF; the daemon signals only the
pid it started, and reports a signalled command as -1 (Go's ExitCode()).
A VM that ended keeps its record: `get` answers its status (TERMINATED, TIMEOUT,
...) with the `errorType` the platform gives (OOM_KILLED for its memory, as the SDK's
own messages read it); an id it never made is `HTTP 404`.
Fault injection (fake-only, on `Cloud`): `create_delay_s`, `creation_delay_s`,
`lose_create_responses`, `failing_gets` (the next N `get`s answer HTTP 503);
`simulate_death` (the platform ended the VM).
"""

from __future__ import annotations

import asyncio
import contextlib
import types
import uuid
from datetime import UTC, datetime
from typing import Any

from prime_sandboxes import (
    APIError,
    APITimeoutError,
    CommandResponse,
    CommandTimeoutError,
    CreateSandboxRequest,
    Sandbox,
    SandboxNotRunningError,
)

from tests.support.fakes._box import LocalBox

_CHUNK = 64 * 1024


class _Record:
    def __init__(self, request: CreateSandboxRequest, box: LocalBox) -> None:
        self.request = request
        self.box = box
        self.status = "PENDING"
        self.ended_as = ("TERMINATED", None)  # (status, errorType) once the VM is gone


class Cloud:
    """What the Prime service knows, plus fault injection for tests."""

    def __init__(self) -> None:
        self.sandboxes: dict[str, _Record] = {}
        self.by_key: dict[str, str] = {}
        self.create_requests: list[CreateSandboxRequest] = []
        self.deleted: list[str] = []
        self.create_delay_s = 0.0  # the VM exists, the response is still on its way
        self.creation_delay_s = 0.0  # until wait_for_creation sees RUNNING
        self.lose_create_responses = 0  # the next N creates succeed but time out
        self.failing_gets = 0  # the next N gets answer HTTP 503

    def live(self) -> list[str]:
        return [i for i, r in self.sandboxes.items() if not r.box.dead]


class _Stream:
    """Like the SDK's _AsyncProcessStream: an async iterator of byte chunks."""

    def __init__(self, pipe: asyncio.StreamReader) -> None:
        self._pipe = pipe

    def __aiter__(self) -> _Stream:
        return self

    async def __anext__(self) -> bytes:
        chunk = await self._pipe.read(_CHUNK)
        if not chunk:
            raise StopAsyncIteration
        return chunk


class AsyncSandboxProcess:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout and proc.stderr and proc.stdin
        self._proc = proc
        self.stdout = _Stream(proc.stdout)
        self.stderr = _Stream(proc.stderr)
        self._closed = False

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def returncode(self) -> int | None:
        code = self._proc.returncode
        return None if code is None else (-1 if code < 0 else code)

    async def write_stdin(self, data: bytes) -> None:
        if not data:
            return
        if self._closed or self._proc.returncode is not None:
            raise BrokenPipeError("process has exited")
        assert self._proc.stdin
        self._proc.stdin.write(data)
        await self._proc.stdin.drain()

    async def wait(self) -> int:
        code = await self._proc.wait()
        return -1 if code < 0 else code

    async def terminate(self) -> None:
        if self._proc.returncode is None:
            self._proc.terminate()

    async def kill(self) -> None:
        if self._proc.returncode is None:
            self._proc.kill()

    async def aclose(self) -> None:
        if not self._closed and self._proc.returncode is None:
            self._proc.kill()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._proc.wait(), 5)
        self._closed = True


class AsyncSandboxClient:
    cloud: Cloud

    def __init__(self, api_key: str | None = None) -> None:
        self._closed = False

    def _running(self, sandbox_id: str) -> _Record:
        record = self.cloud.sandboxes.get(sandbox_id)
        if record is None:
            raise APIError(f"HTTP 404: sandbox {sandbox_id} not found")
        if record.box.dead:
            record.status = record.ended_as[0]
        if record.status != "RUNNING":
            raise SandboxNotRunningError(sandbox_id, status=record.status)
        return record

    async def create(self, request: CreateSandboxRequest) -> Sandbox:
        cloud = self.cloud
        cloud.create_requests.append(request)
        key = request.idempotency_key
        if key is not None and key in cloud.by_key:
            sandbox_id = cloud.by_key[key]
        else:
            sandbox_id = f"fake{uuid.uuid4().hex[:12]}"
            box = LocalBox(sandbox_id, request.environment_vars, None)
            cloud.sandboxes[sandbox_id] = _Record(request, box)
            if key is not None:
                cloud.by_key[key] = sandbox_id
        await asyncio.sleep(cloud.create_delay_s)
        if cloud.lose_create_responses > 0:
            cloud.lose_create_responses -= 1
            raise APITimeoutError("Request timed out: (fake) response lost")
        return self._model(sandbox_id)

    def _model(self, sandbox_id: str) -> Sandbox:
        record = self.cloud.sandboxes[sandbox_id]
        r = record.request
        now = datetime.now(UTC).isoformat()
        return Sandbox.model_validate(
            {
                "id": sandbox_id,
                "name": r.name,
                "dockerImage": r.docker_image,
                "cpuCores": r.cpu_cores,
                "memoryGB": r.memory_gb,
                "diskSizeGB": r.disk_size_gb,
                "diskMountPath": "/",
                "gpuCount": r.gpu_count,
                "vm": True,
                "status": record.status,
                "errorType": record.ended_as[1] if record.box.dead else None,
                "timeoutMinutes": r.timeout_minutes,
                "labels": r.labels,
                "createdAt": now,
                "updatedAt": now,
            }
        )

    async def wait_for_creation(
        self,
        sandbox_id: str,
        max_attempts: int = 60,
        stability_checks: int = 1,
        image_build_timeout_seconds: int = 3000,
    ) -> None:
        record = self.cloud.sandboxes[sandbox_id]
        await asyncio.sleep(self.cloud.creation_delay_s)
        if record.box.dead:
            raise SandboxNotRunningError(sandbox_id, status="TERMINATED")
        record.status = "RUNNING"

    async def get(self, sandbox_id: str) -> Sandbox:
        if self.cloud.failing_gets > 0:
            self.cloud.failing_gets -= 1
            raise APIError("HTTP 503: (fake) service unavailable")
        record = self.cloud.sandboxes.get(sandbox_id)
        if record is None:
            raise APIError(f"HTTP 404: sandbox {sandbox_id} not found")
        if record.box.dead:
            record.status = record.ended_as[0]
        return self._model(sandbox_id)

    async def open_process(
        self,
        sandbox_id: str,
        command: str,
        working_dir: str | None = None,
        env: dict[str, str] | None = None,
    ) -> AsyncSandboxProcess:
        box = self._running(sandbox_id).box
        return AsyncSandboxProcess(await box.spawn(["/bin/bash", "-c", command], env, working_dir))

    async def execute_command(
        self,
        sandbox_id: str,
        command: str,
        working_dir: str | None = None,
        env: dict[str, str] | None = None,
        timeout: int | None = None,
    ) -> CommandResponse:
        box = self._running(sandbox_id).box
        proc = await box.spawn(["/bin/bash", "-c", command], env, working_dir)
        assert proc.stdin
        proc.stdin.close()
        effective = timeout if timeout is not None else 300
        try:
            out, err = await asyncio.wait_for(proc.communicate(), effective)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise CommandTimeoutError(sandbox_id, command, effective) from None
        code = proc.returncode
        assert code is not None
        return CommandResponse(
            stdout=out.decode("utf-8", errors="replace"),
            stderr=err.decode("utf-8", errors="replace"),
            exit_code=-1 if code < 0 else code,
        )

    async def delete(self, sandbox_id: str) -> dict[str, Any]:
        record = self.cloud.sandboxes.get(sandbox_id)
        if record is None:
            raise APIError(f"HTTP 404: sandbox {sandbox_id} not found")
        await asyncio.to_thread(record.box.destroy)
        record.status = "TERMINATED"
        self.cloud.deleted.append(sandbox_id)
        return {"success": True}

    async def aclose(self) -> None:
        self._closed = True

    # -- fake-only ----------------------------------------------------------------
    def simulate_death(
        self, sandbox_id: str, status: str = "TERMINATED", error_type: str | None = None
    ) -> None:
        """The platform ended the VM: terminated it (an operator, a host failure), or
        `status` / `error_type` (TIMEOUT; OOM_KILLED). Safe from any thread."""
        record = self.cloud.sandboxes[sandbox_id]
        record.ended_as = (status, error_type)
        record.box.destroy()


def fake_sdk(cloud: Cloud | None = None) -> types.SimpleNamespace:
    """A `prime_sandboxes`-shaped namespace to pass as PrimeRuntime(sdk=...)."""
    import prime_sandboxes

    cloud = cloud or Cloud()
    return types.SimpleNamespace(
        AsyncSandboxClient=type("AsyncSandboxClient", (AsyncSandboxClient,), {"cloud": cloud}),
        CreateSandboxRequest=CreateSandboxRequest,
        APIError=prime_sandboxes.APIError,
        APITimeoutError=prime_sandboxes.APITimeoutError,
        cloud=cloud,
    )
