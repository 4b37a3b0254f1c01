"""The fakes in tests/support/fakes/ must not drift from the real SDKs they stand in for.

Each faked callable is compared with the installed SDK's: every parameter the fake
takes exists in the SDK with the same kind and default, positional parameters come in
the same order, nothing the SDK requires is missing, and async stays async. The fake
may take fewer optional parameters (it fakes what the runtime calls; a call with any
other keyword fails in the fake, so the self-check catches that side).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.fakes import modal_fake

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
_VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


def drift(fake: Callable[..., Any], real: Callable[..., Any]) -> list[str]:
    """How `fake`'s signature departs from `real`'s (empty: it is faithful)."""
    problems = []
    fsig, rsig = inspect.signature(fake), inspect.signature(real)
    for p in fsig.parameters.values():
        r = rsig.parameters.get(p.name)
        if r is None:
            problems.append(f"takes {p.name!r}, which the SDK does not")
        elif r.kind != p.kind:
            problems.append(f"{p.name!r} is {p.kind.description}, the SDK's {r.kind.description}")
        elif r.default is not p.default and r.default != p.default:
            problems.append(f"{p.name!r} defaults to {p.default!r}, the SDK's to {r.default!r}")
    fpos = [p.name for p in fsig.parameters.values() if p.kind in _POSITIONAL]
    rpos = [p.name for p in rsig.parameters.values() if p.kind in _POSITIONAL]
    if fpos != rpos[: len(fpos)]:
        problems.append(f"positional order {fpos} differs from the SDK's {rpos}")
    for r in rsig.parameters.values():
        if r.default is inspect.Parameter.empty and r.kind not in _VARIADIC:
            if r.name not in fsig.parameters:
                problems.append(f"lacks {r.name!r}, which the SDK requires")
    if inspect.iscoroutinefunction(fake) != inspect.iscoroutinefunction(real):
        problems.append("async in one and not in the other")
    return problems


# -- the checker itself can fail ---------------------------------------------------
async def _real(sandbox_id: str, command: str, working_dir: str | None = None) -> None: ...


async def _renamed(sandbox_id: str, cmd: str) -> None: ...


async def _new_default(sandbox_id: str, command: str, working_dir: str | None = "/") -> None: ...


def _sync(sandbox_id: str, command: str) -> None: ...


async def _reordered(command: str, sandbox_id: str) -> None: ...


async def _keyword_only(sandbox_id: str, *, command: str) -> None: ...


@pytest.mark.parametrize(
    "fake", [_renamed, _new_default, _sync, _reordered, _keyword_only], ids=lambda f: f.__name__
)
def test_the_checker_catches_drift(fake: Callable[..., Any]) -> None:
    assert drift(fake, _real)


def test_the_checker_accepts_a_faithful_subset() -> None:
    async def subset(sandbox_id: str, command: str) -> None: ...

    assert drift(subset, _real) == []


# -- Modal -------------------------------------------------------------------------
def _modal_pairs() -> list[tuple[str, Any, Any]]:
    modal = pytest.importorskip("modal")
    from modal.container_process import ContainerProcess
    from modal.io_streams import StreamReader, StreamWriter

    f = modal_fake
    return [
        ("App.lookup.aio", f.fake_sdk().App.lookup.aio, modal.App.lookup.aio),
        ("Image.from_registry", f.Image.from_registry, modal.Image.from_registry),
        ("Sandbox.create.aio", f.fake_sdk().Sandbox.create.aio, modal.Sandbox.create.aio),
        ("Sandbox.from_id.aio", f.fake_sdk().Sandbox.from_id.aio, modal.Sandbox.from_id.aio),
        ("Sandbox.exec.aio", f.Sandbox.exec.aio, modal.Sandbox.exec.aio),
        ("Sandbox.terminate.aio", f.Sandbox.terminate.aio, modal.Sandbox.terminate.aio),
        ("Sandbox.poll.aio", f.Sandbox.poll.aio, modal.Sandbox.poll.aio),
        ("Sandbox.wait.aio", f.Sandbox.wait.aio, modal.Sandbox.wait.aio),
        ("ContainerProcess.wait.aio", f.ContainerProcess.wait.aio, ContainerProcess.wait.aio),
        ("StreamReader.read.aio", f.StreamReader.read.aio, StreamReader.read.aio),
        ("StreamReader.__aiter__", f.StreamReader.__aiter__, StreamReader.__aiter__),
        ("StreamWriter.write", f.StreamWriter.write, StreamWriter.write),
        ("StreamWriter.write_eof", f.StreamWriter.write_eof, StreamWriter.write_eof),
        ("StreamWriter.drain.aio", f.StreamWriter.drain.aio, StreamWriter.drain.aio),
    ]


def test_modal_fake_signatures_match_the_sdk() -> None:
    problems = {name: p for name, fake, real in _modal_pairs() if (p := drift(fake, real))}
    assert problems == {}


def test_modal_fake_properties_exist_in_the_sdk() -> None:
    modal = pytest.importorskip("modal")
    from modal.container_process import ContainerProcess

    for cls, name in [
        (modal.Sandbox, "object_id"),
        (ContainerProcess, "stdout"),
        (ContainerProcess, "stderr"),
        (ContainerProcess, "stdin"),
    ]:
        assert isinstance(inspect.getattr_static(cls, name), property), (cls, name)


def test_modal_fake_tells_a_finished_sandbox_as_the_sdk_does() -> None:
    """What poll() and wait() say of a sandbox that ended: the SDK's own mapping."""
    pytest.importorskip("modal")
    from modal.exception import SandboxTerminatedError, SandboxTimeoutError
    from modal.sandbox import _common
    from modal_proto import api_pb2

    status = api_pb2.GenericResult
    terminated = status(status=status.GENERIC_STATUS_TERMINATED)
    timed_out = status(status=status.GENERIC_STATUS_TIMEOUT)
    assert _common._result_returncode(terminated) == 137  # the fake's, terminated
    assert _common._result_returncode(timed_out) == 124  # the fake's, past its timeout
    with pytest.raises(SandboxTerminatedError):
        _common.raise_for_wait_result("sb", terminated, raise_on_termination=True)
    with pytest.raises(SandboxTimeoutError):
        _common.raise_for_wait_result("sb", timed_out, raise_on_termination=True)
    oom = status(status=status.GENERIC_STATUS_KERNEL_OOM_KILL, exitcode=137)
    _common.raise_for_wait_result("sb", oom, raise_on_termination=True)  # returns: no word


# -- Prime -------------------------------------------------------------------------
def _prime_pairs() -> list[tuple[str, Any, Any]]:
    ps = pytest.importorskip("prime_sandboxes")
    from prime_sandboxes.process import AsyncSandboxProcess, _AsyncProcessStream

    from tests.support.fakes import prime_fake as f

    client, fclient = ps.AsyncSandboxClient, f.AsyncSandboxClient
    pairs = [
        (f"AsyncSandboxClient.{m}", getattr(fclient, m), getattr(client, m))
        for m in (
            "__init__",
            "create",
            "wait_for_creation",
            "get",
            "open_process",
            "execute_command",
            "delete",
            "aclose",
        )
    ]
    pairs += [
        (
            f"AsyncSandboxProcess.{m}",
            getattr(f.AsyncSandboxProcess, m),
            getattr(AsyncSandboxProcess, m),
        )
        for m in ("write_stdin", "wait", "terminate", "kill", "aclose")
    ]
    pairs += [
        (f"process stream.{m}", getattr(f._Stream, m), getattr(_AsyncProcessStream, m))
        for m in ("__aiter__", "__anext__")
    ]
    return pairs


def test_prime_fake_signatures_match_the_sdk() -> None:
    problems = {name: p for name, fake, real in _prime_pairs() if (p := drift(fake, real))}
    assert problems == {}


def test_prime_process_handle_shape_matches_the_sdk() -> None:
    pytest.importorskip("prime_sandboxes")
    from prime_sandboxes.process import AsyncSandboxProcess

    for name in ("pid", "returncode"):
        assert isinstance(inspect.getattr_static(AsyncSandboxProcess, name), property), name
    # stdout/stderr are plain attributes set by the constructor in the SDK.
    init = inspect.getsource(AsyncSandboxProcess.__init__)
    assert "self.stdout = _AsyncProcessStream()" in init
    assert "self.stderr = _AsyncProcessStream()" in init


def test_prime_models_the_runtime_reads_have_those_fields() -> None:
    ps = pytest.importorskip("prime_sandboxes")

    assert {"id", "status", "error_type", "termination_reason", "error_message"} <= set(
        ps.Sandbox.model_fields
    )
    assert {"exit_code", "stdout", "stderr"} <= set(ps.CommandResponse.model_fields)
    assert {"idempotency_key", "labels", "environment_vars", "docker_image"} <= set(
        ps.CreateSandboxRequest.model_fields
    )


# -- E2B ---------------------------------------------------------------------------
def _e2b_pairs() -> list[tuple[str, Any, Any]]:
    e2b = pytest.importorskip("e2b")
    from e2b.sandbox_async.commands.command import Commands
    from e2b.sandbox_async.commands.command_handle import AsyncCommandHandle

    from tests.support.fakes import e2b_fake as f

    sandbox, fsandbox = e2b.AsyncSandbox, f.fake_sdk().AsyncSandbox
    return [
        ("AsyncSandbox.create", fsandbox.create, sandbox.create),
        ("AsyncSandbox.is_running", f.AsyncSandbox.is_running, sandbox.is_running),
        # kill is one name for two calls: on an instance, and on the class with an id.
        # (the SDK's descriptor wraps its async method in a plain function: compare the method)
        (
            "AsyncSandbox.kill (instance)",
            f.AsyncSandbox._kill,
            inspect.getattr_static(sandbox, "kill").method,
        ),
        ("AsyncSandbox.kill (class)", fsandbox._cls_kill, sandbox._cls_kill),
        (
            "AsyncSandbox.get_info (instance)",
            f.AsyncSandbox._get_info,
            inspect.getattr_static(sandbox, "get_info").method,
        ),
        ("AsyncSandbox.get_info (class)", fsandbox._cls_get_info, sandbox._cls_get_info),
        *[
            (f"Commands.{m}", getattr(f.Commands, m), getattr(Commands, m))
            for m in ("run", "send_stdin", "close_stdin", "kill")
        ],
        ("AsyncCommandHandle.wait", f.AsyncCommandHandle.wait, AsyncCommandHandle.wait),
    ]


def test_e2b_fake_signatures_match_the_sdk() -> None:
    problems = {name: p for name, fake, real in _e2b_pairs() if (p := drift(fake, real))}
    assert problems == {}


def test_e2b_fake_properties_and_exceptions_are_the_sdks() -> None:
    e2b = pytest.importorskip("e2b")
    from e2b.sandbox_async.commands.command_handle import AsyncCommandHandle

    for cls, name in [
        (e2b.AsyncSandbox, "sandbox_id"),
        (e2b.AsyncSandbox, "commands"),
        (AsyncCommandHandle, "pid"),
    ]:
        assert isinstance(inspect.getattr_static(cls, name), property), (cls, name)
    # What the runtime reads of a result and of a nonzero exit.
    assert {"exit_code"} <= set(inspect.signature(e2b.CommandExitException).parameters)
    assert issubclass(e2b.SandboxNotRunningException, e2b.SandboxException)
    assert "timeout" in inspect.signature(e2b.AsyncSandbox.create).parameters


def test_the_names_box_lost_reads_exist_in_the_sdks() -> None:
    """What the runtimes read to tell how a box ended (`RemoteBox._ended`), by the names
    the fakes give them."""
    modal = pytest.importorskip("modal")
    for name in ("NotFoundError", "SandboxTerminatedError", "SandboxTimeoutError"):
        assert getattr(modal.exception, name) is getattr(modal_fake, name), name
    e2b = pytest.importorskip("e2b")
    from tests.support.fakes import e2b_fake

    assert e2b_fake.fake_sdk().SandboxNotFoundException is e2b.SandboxNotFoundException
    assert "state" in {f.name for f in dataclasses.fields(e2b.SandboxInfo)}
    assert str(e2b.SandboxState.RUNNING) == "running"
