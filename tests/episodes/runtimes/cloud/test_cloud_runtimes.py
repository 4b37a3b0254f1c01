"""What ModalRuntime, PrimeRuntime and E2BRuntime promise beyond the shared self-check, on
the SDK fakes: leak-proof provisioning, fail-closed signalling, and one clear error when
unusable."""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import sys
import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from episodes.errors import RuntimeUnavailable, SpecError
from episodes.runtimes.cloud import remote_shell
from episodes.runtimes.cloud.e2b import E2BRuntime
from episodes.runtimes.cloud.modal import ModalRuntime
from episodes.runtimes.cloud.prime import PrimeRuntime
from episodes.runtimes.selfcheck.kit import read_line
from episodes.types.runtime import E2BConfig, ModalConfig, PrimeConfig
from tests.support.fakes import modal_fake

prime_fake = pytest.importorskip("tests.support.fakes.prime_fake")
e2b_fake = pytest.importorskip("tests.support.fakes.e2b_fake")

T = 30.0
SLEEPER = 'import time; print("ready", flush=True); time.sleep(600)'


async def within(aw: Any, timeout: float = T) -> Any:
    return await asyncio.wait_for(aw, timeout)


async def until(predicate: Callable[[], bool], timeout: float = T) -> None:
    async def poll() -> None:
        while not predicate():
            await asyncio.sleep(0.02)

    await within(poll(), timeout)


@contextlib.asynccontextmanager
async def stopping(runtime: Any) -> AsyncIterator[Any]:
    try:
        yield runtime
    finally:
        await within(runtime.stop())


def make_modal(**config: Any) -> tuple[ModalRuntime, Any]:
    sdk = modal_fake.fake_sdk()
    workdir = tempfile.mkdtemp(prefix="fake-modal-work-")
    runtime = ModalRuntime(ModalConfig(workdir=workdir, **config), labels={"k": "v"}, sdk=sdk)
    return runtime, sdk.cloud


def make_prime(tmp_path: Path, **config: Any) -> tuple[PrimeRuntime, Any]:
    sdk = prime_fake.fake_sdk()
    workdir = str(tmp_path / "work")
    runtime = PrimeRuntime(PrimeConfig(workdir=workdir, **config), labels={"k": "v"}, sdk=sdk)
    return runtime, sdk.cloud


def make_e2b(tmp_path: Path, **config: Any) -> tuple[E2BRuntime, Any]:
    sdk = e2b_fake.fake_sdk()
    config = {"workdir": str(tmp_path / "work"), "python": sys.executable, **config}
    runtime = E2BRuntime(E2BConfig(**config), labels={"k": "v"}, sdk=sdk)
    return runtime, sdk.cloud


def make(kind: str, tmp_path: Path, **config: Any) -> tuple[Any, Any]:
    if kind == "modal":
        return make_modal(**config)
    return (make_prime if kind == "prime" else make_e2b)(tmp_path, **config)


# -- Prime provisioning ----------------------------------------------------------------
async def test_prime_start_cancelled_during_wait_for_creation_deletes_the_sandbox(
    tmp_path: Path,
) -> None:
    runtime, cloud = make_prime(tmp_path)
    cloud.creation_delay_s = 600
    task = asyncio.ensure_future(runtime.start())
    await until(lambda: bool(cloud.sandboxes))  # created; now waiting for RUNNING
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await within(task)
    assert cloud.deleted == list(cloud.sandboxes)
    assert cloud.live() == []
    await within(runtime.stop())


async def test_prime_start_cancelled_while_create_is_in_flight_deletes_the_sandbox(
    tmp_path: Path,
) -> None:
    runtime, cloud = make_prime(tmp_path)
    cloud.create_delay_s = 1.0  # the VM exists before the create call returns
    task = asyncio.ensure_future(runtime.start())
    await until(lambda: bool(cloud.sandboxes))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await within(task)
    assert len(cloud.sandboxes) == 1
    assert cloud.deleted == list(cloud.sandboxes)
    await within(runtime.stop())


async def test_prime_retried_create_sends_the_same_idempotency_key(tmp_path: Path) -> None:
    runtime, cloud = make_prime(tmp_path)
    cloud.lose_create_responses = 1  # made on the server, but the answer timed out
    async with stopping(runtime):
        await within(runtime.start())
        keys = [r.idempotency_key for r in cloud.create_requests]
        assert len(keys) == 2 and keys[0] == keys[1] == runtime.idempotency_key
        assert list(cloud.sandboxes) == [runtime.id]  # one VM, not two
        assert await runtime.alive()
    assert cloud.live() == []


async def test_prime_start_after_failed_creates_reuses_the_key(tmp_path: Path) -> None:
    from prime_sandboxes import APITimeoutError

    runtime, cloud = make_prime(tmp_path)
    cloud.lose_create_responses = 3
    async with stopping(runtime):
        with pytest.raises(APITimeoutError):
            await within(runtime.start())
        await within(runtime.start())  # e.g. Temporal retrying the provision
        assert {r.idempotency_key for r in cloud.create_requests} == {runtime.idempotency_key}
        assert len(cloud.create_requests) == 4
        assert list(cloud.sandboxes) == [runtime.id]
    assert cloud.live() == []


async def test_prime_request_carries_config_and_labels(tmp_path: Path) -> None:
    runtime, cloud = make_prime(tmp_path, cpu_cores=2, env={"BOX": "1"})
    async with stopping(runtime):
        await within(runtime.start())
        request = cloud.create_requests[0]
        assert request.cpu_cores == 2 and request.environment_vars == {"BOX": "1"}
        assert request.labels == ["k=v"]
        assert Path(runtime.config.workdir).is_dir()  # made by start()


def test_prime_vm_false_says_what_to_change() -> None:
    with pytest.raises(SpecError, match="set `vm: true`"):
        PrimeRuntime(PrimeConfig(vm=False))


async def test_prime_without_credentials_is_unavailable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("PRIME_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.prime/config.json either
    with pytest.raises(RuntimeUnavailable, match="PRIME_API_KEY"):
        await PrimeRuntime(PrimeConfig()).start()


async def test_prime_sdk_without_open_process_is_too_old(monkeypatch: pytest.MonkeyPatch) -> None:
    import prime_sandboxes

    monkeypatch.delattr(prime_sandboxes.AsyncSandboxClient, "open_process")
    with pytest.raises(RuntimeUnavailable, match="prime-sandboxes too old: need open_process"):
        await PrimeRuntime(PrimeConfig()).start()


async def test_prime_write_after_close_stdin_raises(tmp_path: Path) -> None:
    runtime, _ = make_prime(tmp_path)
    async with stopping(runtime):
        await within(runtime.start())
        code = "import sys; print(len(sys.stdin.buffer.read()))"
        proc = await within(runtime.open_process([sys.executable, "-c", code]))
        await proc.write(b"x" * 200_000)  # more than a FIFO holds: the relay must drain it
        await within(proc.close_stdin())
        with pytest.raises(BrokenPipeError):
            await proc.write(b"more")
        assert await within(proc.stdout.read()) == b"200000\n"
        assert await within(proc.wait()) == 0


# -- Modal provisioning ----------------------------------------------------------------
async def test_modal_start_cancelled_while_create_is_in_flight_terminates_it() -> None:
    runtime, cloud = make_modal()
    cloud.create_delay_s = 1.0
    task = asyncio.ensure_future(runtime.start())
    await until(lambda: bool(cloud.sandboxes))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await within(task)
    await until(lambda: cloud.live() == [])
    await within(runtime.stop())


async def test_modal_create_gets_config_and_labels_as_tags() -> None:
    runtime, cloud = make_modal(cpu=2.0, memory_mb=2048, timeout_s=600, env={"BOX": "1"})
    async with stopping(runtime):
        await within(runtime.start())
        (sandbox,) = cloud.sandboxes
        assert runtime.id == sandbox.object_id
        assert sandbox.tags == {"k": "v"}
        args = sandbox.create_args
        assert (args["cpu"], args["memory"], args["timeout"]) == (2.0, 2048, 600)
        assert args["env"] == {"BOX": "1"} and args["image"].tag == runtime.config.image
    assert cloud.live() == []


async def test_modal_without_credentials_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    config = pytest.importorskip("modal.config").config
    monkeypatch.delenv("MODAL_TOKEN_ID", raising=False)
    monkeypatch.delenv("MODAL_TOKEN_SECRET", raising=False)
    if config.get("token_id"):
        pytest.skip("a Modal profile with a token is configured on this machine")
    with pytest.raises(RuntimeUnavailable, match="MODAL_TOKEN_ID"):
        await ModalRuntime(ModalConfig()).start()


# -- fail closed -----------------------------------------------------------------------
def shim_dir(tmp_path: Path) -> Path:
    """A `sh` first on the box's PATH that hangs or fails while a flag file exists."""
    d = tmp_path / "shim"
    d.mkdir()
    sh = d / "sh"
    sh.write_text(
        "#!/bin/sh\n"
        f'[ -e "{d}/hang" ] && exec sleep 600\n'
        f'[ -e "{d}/broken" ] && exit 127\n'
        'exec /bin/sh "$@"\n'
    )
    sh.chmod(sh.stat().st_mode | stat.S_IXUSR)
    return d


def shimmed(kind: str, tmp_path: Path) -> tuple[Any, Any, Path]:
    d = shim_dir(tmp_path)
    runtime, cloud = make(kind, tmp_path, env={"PATH": f"{d}:/usr/bin:/bin"})
    return runtime, cloud, d


@pytest.mark.parametrize("kind", ["modal", "prime", "e2b"])
async def test_no_pid_in_time_destroys_the_box(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime, cloud, d = shimmed(kind, tmp_path)
    monkeypatch.setattr(remote_shell, "PID_WAIT_S", 1.0)
    async with stopping(runtime):
        await within(runtime.start())
        (d / "hang").touch()
        with pytest.raises(RuntimeError, match=r"did not report its pid.*destroyed"):
            await within(runtime.open_process([sys.executable, "-c", SLEEPER]))
        assert not await runtime.alive()
        assert cloud.live() == []


@pytest.mark.parametrize("kind", ["modal", "prime", "e2b"])
async def test_a_signal_that_cannot_be_sent_destroys_the_box(kind: str, tmp_path: Path) -> None:
    runtime, cloud, d = shimmed(kind, tmp_path)
    async with stopping(runtime):
        await within(runtime.start())
        proc = await within(runtime.open_process([sys.executable, "-c", SLEEPER]))
        assert await within(proc.stdout.read(6)) == b"ready\n"
        pid = proc.pid
        (d / "broken").touch()  # the next `sh` (the signal command) fails
        await within(proc.terminate())
        assert await within(proc.wait()) == -9
        assert not await runtime.alive()
        assert cloud.live() == []
        await until(lambda: not _exists(pid))


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError, ValueError):
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    return True


# -- failures of the program or the wrapper are reported, not hidden -------------------
@pytest.mark.parametrize("kind", ["modal", "prime", "e2b"])
async def test_a_missing_program_exits_nonzero_with_its_error(kind: str, tmp_path: Path) -> None:
    runtime = make(kind, tmp_path)[0]
    async with stopping(runtime):
        await within(runtime.start())
        proc = await within(runtime.open_process(["/nonexistent/harness"]))
        assert await within(proc.wait()) != 0
        assert b"/nonexistent/harness" in await within(proc.stderr.read())
        assert await runtime.alive()


async def test_prime_wrapper_that_cannot_start_reports_why(tmp_path: Path) -> None:
    runtime, _ = make_prime(tmp_path)
    async with stopping(runtime):
        await within(runtime.start())
        # No place for the stdin FIFO: the wrapper gives up before the program starts.
        env = {"TMPDIR": str(tmp_path / "missing")}
        proc = await within(runtime.open_process([sys.executable, "-c", SLEEPER], env=env))
        assert proc.pid is None
        assert await within(proc.wait()) == 125
        assert b"episodes: cannot make" in await within(proc.stderr.read())
        await within(proc.terminate())  # nothing to signal: a no-op, the box stays
        assert await runtime.alive()


# -- E2B ---------------------------------------------------------------------------------
ALL_BYTES = "import sys; b = bytes(range(256)) * 3; sys.stdout.buffer.write(b); sys.stderr.buffer.write(b[::-1])"


async def test_e2b_carries_bytes_that_are_not_utf8(tmp_path: Path) -> None:
    # The SDK decodes command output as UTF-8 text: without the bridge, half of these
    # bytes arrive as U+FFFD (the harness protocol's length prefix among them).
    runtime, _ = make_e2b(tmp_path)
    async with stopping(runtime):
        await within(runtime.start())
        proc = await within(runtime.open_process([sys.executable, "-c", ALL_BYTES]))
        out, err = await within(asyncio.gather(proc.stdout.read(), proc.stderr.read()))
        assert out == bytes(range(256)) * 3
        assert err == (bytes(range(256)) * 3)[::-1]
        assert await within(proc.wait()) == 0


async def test_e2b_harness_processes_have_no_command_timeout(tmp_path: Path) -> None:
    # envd ends a command's stream (and the command) at `timeout`, 60 s by default.
    runtime, _ = make_e2b(tmp_path)
    async with stopping(runtime):
        await within(runtime.start())
        calls: list[dict[str, Any]] = []
        run = runtime.sandbox.commands.run

        async def spy(cmd: str, **kw: Any) -> Any:
            calls.append(kw)
            return await run(cmd, **kw)

        runtime.sandbox.commands.run = spy
        proc = await within(runtime.open_process([sys.executable, "-c", SLEEPER]))
        assert await within(proc.stdout.read(6)) == b"ready\n"
        assert calls[0]["timeout"] == 0 and calls[0]["stdin"] is True
        await within(proc.kill())
        assert await within(proc.wait()) == -9


async def test_e2b_fake_cuts_a_command_at_its_timeout(tmp_path: Path) -> None:
    sdk = e2b_fake.fake_sdk()
    sandbox = await sdk.AsyncSandbox.create()
    try:
        handle = await sandbox.commands.run("sleep 600", background=True, timeout=1)
        with pytest.raises(e2b_fake.TimeoutException):
            await within(handle.wait())
    finally:
        await sandbox.kill()


async def test_e2b_create_gets_template_timeout_env_and_labels_as_metadata(
    tmp_path: Path,
) -> None:
    runtime, cloud = make_e2b(tmp_path, template="my-template", timeout_s=900, env={"BOX": "1"})
    async with stopping(runtime):
        await within(runtime.start())
        (sandbox,) = cloud.sandboxes.values()
        assert runtime.id == sandbox.sandbox_id and sandbox.metadata == {"k": "v"}
        assert sandbox.create_args == {
            "template": "my-template",
            "timeout": 900,
            "envs": {"BOX": "1"},
        }
        assert Path(runtime.config.workdir).is_dir()  # made by start()
        proc = await within(
            runtime.open_process(
                [sys.executable, "-c", "import os; print(os.environ['BOX'], os.getcwd())"]
            )
        )
        assert await within(proc.stdout.read()) == f"1 {runtime.config.workdir}\n".encode()
    assert cloud.live() == []


async def test_e2b_sandbox_gone_is_not_alive_and_runs_nothing(tmp_path: Path) -> None:
    runtime, cloud = make_e2b(tmp_path)
    async with stopping(runtime):
        await within(runtime.start())
        runtime.sandbox.simulate_death()  # its timeout, a host failure
        assert not await runtime.alive()
        with pytest.raises(e2b_fake.SandboxNotRunningException):
            await within(runtime.open_process([sys.executable, "-c", SLEEPER]))
    # A kill of a sandbox that is gone is the API's 404: nothing to do.
    from episodes.runtimes.cloud.e2b import destroy_sandbox

    sdk = e2b_fake.fake_sdk(cloud)
    await destroy_sandbox(runtime.id or "igone", sdk)
    await destroy_sandbox("inever-made", sdk)


async def test_e2b_start_cancelled_while_create_is_in_flight_kills_it(tmp_path: Path) -> None:
    runtime, cloud = make_e2b(tmp_path)
    cloud.create_delay_s = 1.0
    task = asyncio.ensure_future(runtime.start())
    await until(lambda: bool(cloud.sandboxes))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await within(task)
    await until(lambda: cloud.live() == [])
    await within(runtime.stop())


async def test_e2b_without_a_python_in_the_box_says_why(tmp_path: Path) -> None:
    runtime, _ = make_e2b(tmp_path, python="/nonexistent/python3")
    async with stopping(runtime):
        await within(runtime.start())
        proc = await within(runtime.open_process([sys.executable, "-c", SLEEPER]))
        assert proc.pid is None
        assert await within(proc.wait()) == 127
        assert b"/nonexistent/python3" in await within(proc.stderr.read())


async def test_e2b_without_credentials_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("E2B_API_KEY", raising=False)
    with pytest.raises(RuntimeUnavailable, match="E2B_API_KEY"):
        await E2BRuntime(E2BConfig()).start()


# -- how a box ended: lost (a failover), past its memory, or there (docs/failures.md) --
def _kill(kind: str, runtime: Any, **how: Any) -> None:
    """The platform ends the box under its processes, as its SDK will then report it."""
    if kind == "prime":
        runtime.client.simulate_death(runtime.id, **how)
    else:
        runtime.sandbox.simulate_death(**how)


def _fail_asks(kind: str, cloud: Any, n: int) -> None:
    """The next `n` questions about a box get the platform's 5xx."""
    field = {"modal": "failing_polls", "prime": "failing_gets", "e2b": "failing_infos"}[kind]
    setattr(cloud, field, n)


async def _ended_under(runtime: Any, kind: str, **how: Any) -> None:
    proc = await within(runtime.open_process([sys.executable, "-c", SLEEPER]))
    assert await read_line(proc.stdout) == b"ready\n"
    await asyncio.to_thread(_kill, kind, runtime, **how)
    await within(proc.wait())


@pytest.mark.parametrize("kind", ["modal", "prime", "e2b"])
async def test_a_box_terminated_from_outside_is_lost(kind: str, tmp_path: Path) -> None:
    runtime, _ = make(kind, tmp_path)
    async with stopping(runtime):
        await within(runtime.start())
        await _ended_under(runtime, kind)
        lost = await within(runtime.box_lost())
        assert lost is not None and runtime.id in lost and "\n" not in lost, lost
        assert await within(runtime.limit_exceeded()) is None
    assert await within(runtime.box_lost()) is None  # stopped by us


@pytest.mark.parametrize("kind", ["modal", "prime", "e2b"])
async def test_a_process_that_exits_by_itself_leaves_its_box_there(
    kind: str, tmp_path: Path
) -> None:
    runtime, _ = make(kind, tmp_path)
    async with stopping(runtime):
        await within(runtime.start())
        proc = await within(runtime.open_process([sys.executable, "-c", "raise SystemExit(3)"]))
        assert await within(proc.wait()) == 3
        assert await within(runtime.box_lost()) is None
        assert await within(runtime.limit_exceeded()) is None


@pytest.mark.parametrize("kind", ["modal", "prime", "e2b"])
async def test_a_platform_that_keeps_answering_5xx_loses_the_box(kind: str, tmp_path: Path) -> None:
    runtime, cloud = make(kind, tmp_path)
    async with stopping(runtime):
        await within(runtime.start())
        _fail_asks(kind, cloud, 2)  # one 5xx, then an answer: the box runs
        assert await within(runtime.box_lost()) is None
        _fail_asks(kind, cloud, 100)  # every ask
        lost = await within(runtime.box_lost(), 60)
        assert lost is not None and "did not answer" in lost and "\n" not in lost, lost
        _fail_asks(kind, cloud, 0)


@pytest.mark.parametrize(
    ("kind", "how", "word"),
    [
        ("modal", {"status": "timeout"}, "timeout"),
        ("prime", {"status": "TIMEOUT", "error_type": "TIMEOUT"}, "timeout"),
        ("prime", {"status": "ERROR", "error_type": "HOST_FAILURE"}, "HOST_FAILURE"),
    ],
)
async def test_a_box_past_its_platform_timeout_or_failed_is_lost(
    kind: str, how: dict[str, Any], word: str, tmp_path: Path
) -> None:
    runtime, _ = make(kind, tmp_path)
    async with stopping(runtime):
        await within(runtime.start())
        await _ended_under(runtime, kind, **how)
        lost = await within(runtime.box_lost())
        assert lost is not None and word in lost, lost


async def test_a_prime_vm_killed_for_its_memory_is_past_its_limit_not_lost(
    tmp_path: Path,
) -> None:
    runtime, _ = make_prime(tmp_path)
    async with stopping(runtime):
        await within(runtime.start())
        await _ended_under(runtime, "prime", error_type="OOM_KILLED")
        over = await within(runtime.limit_exceeded())
        assert over is not None and "memory" in over and "OOM_KILLED" in over, over
        assert await within(runtime.box_lost()) is None


async def test_a_modal_sandbox_that_ended_otherwise_is_not_called_lost() -> None:
    """Modal's public calls tell terminated and timed out apart from any other end (its
    memory, an eviction): that stays the harness's crash, not a guessed failover."""
    runtime, _ = make_modal()
    async with stopping(runtime):
        await within(runtime.start())
        await _ended_under(runtime, "modal", status="kernel_oom_kill")
        assert await within(runtime.box_lost()) is None
