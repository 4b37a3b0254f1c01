"""The doctor's checks of the worker's own machine: its runtimes (every backend of
`episodes.runtimes.backends`: the sandbox and Docker checked here, the SDK-backed ones
through their SDK loader) and its payload storage; and `Check`, one line of the report,
which every check returns (episodes/ops/doctor.py runs them all and re-exports these)."""

from __future__ import annotations

import asyncio
import importlib.metadata
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HARNESS_IMAGE = "episodes-harness:latest"


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = True

    @property
    def failed(self) -> bool:
        return self.required and not self.ok

    def line(self) -> str:
        mark = "✓" if self.ok else ("✗" if self.required else "·")
        fix = f" — fix: {self.fix}" if self.fix and not self.ok else ""
        return f"{mark} {self.name}: {self.detail}{fix}"


def short_error(e: BaseException) -> str:
    text = str(e) or type(e).__name__
    if "Connection refused" in text or "ConnectionRefused" in text:
        return "connection refused"
    if "dns error" in text.lower():
        return "the host name does not resolve"
    if isinstance(e, TimeoutError):
        return "no answer in time"
    return text.splitlines()[0][:160]


def _sandbox_limits() -> str:
    """How this worker's sandboxes hold their limits (docs/containment.md#limits)."""
    from episodes.runtimes.sandbox import cgroup, seccomp

    filt = "a seccomp filter" if seccomp.program() is not None else "no seccomp (no libseccomp)"
    return f"{filt}; limits in {cgroup.mode_line()}"


def runtime_names() -> tuple[str, ...]:
    """Every runtime the doctor checks: the backends table's."""
    from episodes.runtimes.backends import BACKENDS

    return tuple(BACKENDS)


def check_runtime(name: str, required: bool) -> Check:
    label = f"runtime {name}"
    host_check = _HOST_CHECKS.get(name)
    if host_check is not None:
        return host_check(label, required)
    return _check_sdk(name, label, required)


def _check_sandbox(label: str, required: bool) -> Check:
    from episodes.runtimes.sandbox.runtime import sandbox_problem

    problem = sandbox_problem()
    if problem is not None:
        fix = (
            "apt-get install bubblewrap (and allow user namespaces), or run only "
            "trusted harnesses with harness.runtime.isolation: none"
        )
        return Check(label, False, f"isolation none only: {problem}", fix, required)
    return Check(
        label,
        True,
        f"sandbox (bwrap) and isolation none; sandbox {_sandbox_limits()}",
        required=required,
    )


def _check_docker(label: str, required: bool) -> Check:
    try:
        from episodes.runtimes.docker.engine import shared_client

        api = shared_client().api
        api.ping()
    except Exception as e:
        first = (str(e).splitlines() or [type(e).__name__])[0][:160]
        return Check(
            label,
            False,
            f"no Docker engine answers ({first})",
            "start Docker, or give the worker the engine socket "
            "(docker-compose.docker-runtime.yml)",
            required,
        )
    try:
        api.inspect_image(HARNESS_IMAGE)
    except Exception:
        return Check(
            label,
            False,
            f"engine up, image {HARNESS_IMAGE} missing",
            "scripts/build-image.sh on the worker's host",
            required,
        )
    return Check(label, True, f"engine up, image {HARNESS_IMAGE} present", required=required)


# The runtimes of the worker's own host, checked by what they need there.
_HOST_CHECKS: dict[str, Callable[[str, bool], Check]] = {
    "subprocess": _check_sandbox,
    "docker": _check_docker,
}


def _check_sdk(name: str, label: str, required: bool) -> Check:
    """A backend reached through its SDK: installed, loadable, with credentials (its
    loader raises RuntimeUnavailable as "what: what to do")."""
    from episodes.errors import RuntimeUnavailable
    from episodes.runtimes.backends import sdk_loader

    found = sdk_loader(name)
    if found is None:
        return Check(label, False, "no check for this runtime", "", required)
    dist, load = found
    try:
        version = importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return Check(
            label, False, f"{dist} not installed", f"pip install 'episodes[{name}]'", required
        )
    try:
        load()
    except RuntimeUnavailable as e:
        what, _, fix = str(e).partition(": ")
        return Check(label, False, f"{dist} {version}, {what}", fix, required)
    except Exception as e:
        return Check(
            label, False, f"{dist} {version} fails to load: {type(e).__name__}", "", required
        )
    return Check(label, True, f"{dist} {version}, credentials set", required=required)


async def check_payloads() -> list[Check]:
    from episodes.errors import PayloadsConfigError
    from episodes.payloads.config import LocalStorage, S3Storage
    from episodes.payloads.config import payloads_config_from_env as from_env

    try:
        cfg = from_env()
    except PayloadsConfigError as e:
        return [Check("payloads", False, str(e), "fix the variable it names")]
    out = []
    enc = cfg.encryption
    if enc.type == "aes-gcm":
        n = len(enc.load_keys())
        out.append(Check("payload encryption", True, f"aes-gcm, {n} key(s) (values not shown)"))
    s = cfg.storage
    if isinstance(s, LocalStorage):
        out.append(await asyncio.to_thread(_check_local, s.path))
    elif isinstance(s, S3Storage):
        out.append(await _check_s3(s))
    else:
        out.append(
            Check(
                "blob store", True, "none configured (payloads stay in the history)", required=False
            )
        )
    return out


def _check_local(path: Path) -> Check:
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".doctor-"):
            pass
    except OSError as e:
        return Check(
            "blob store",
            False,
            f"local {path}: not writable ({e.strerror})",
            "EPISODES_PAYLOADS_PATH must be a directory the worker can write",
        )
    return Check("blob store", True, f"local {path} writable")


async def _check_s3(s: object) -> Check:
    bucket = getattr(s, "bucket", "?")
    try:
        import aioboto3

        session = aioboto3.Session()
        kwargs = {
            "endpoint_url": getattr(s, "endpoint_url", None),
            "region_name": getattr(s, "region", None),
        }
        async with session.client("s3", **{k: v for k, v in kwargs.items() if v}) as s3:
            await asyncio.wait_for(s3.head_bucket(Bucket=bucket), 10)
    except ImportError:
        return Check("blob store", False, "s3 needs aioboto3", "pip install 'episodes[s3]'")
    except Exception as e:
        first = (str(e).splitlines() or [type(e).__name__])[0][:160]
        return Check(
            "blob store",
            False,
            f"s3 bucket {bucket!r} not reachable: {first}",
            "check the bucket, EPISODES_S3_ENDPOINT_URL and the AWS credentials",
        )
    return Check("blob store", True, f"s3 bucket {bucket!r} reachable")
