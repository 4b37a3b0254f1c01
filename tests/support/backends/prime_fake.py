"""PrimeRuntime over the in-repo fake of the prime-sandboxes SDK (local processes)."""

from __future__ import annotations

import atexit
import importlib.util
import shutil
import sys
import tempfile

from episodes.runtimes.base import Runtime
from episodes.types.runtime import PrimeConfig

NAME = "prime-fake"
PYTHON = [sys.executable]

_sdks: list[object] = []  # every fake namespace handed out, for leftovers()


def skip_reason() -> str | None:
    # The fake reuses the SDK's request/response models and errors.
    if importlib.util.find_spec("prime_sandboxes") is None:
        return "prime-sandboxes is not installed (pip install 'episodes[prime]')"
    return None


def make_runtime() -> Runtime:
    from episodes.runtimes.cloud.prime import PrimeRuntime
    from tests.support.fakes.prime_fake import fake_sdk

    sdk = fake_sdk()
    _sdks.append(sdk)
    # The "VM" filesystem is the host's: a private workdir, removed at exit.
    workdir = tempfile.mkdtemp(prefix="fake-prime-work-")
    atexit.register(shutil.rmtree, workdir, True)
    return PrimeRuntime(PrimeConfig(workdir=workdir), labels={"test": NAME}, sdk=sdk)


def kill_box(runtime) -> None:  # type: ignore[no-untyped-def]
    runtime.client.simulate_death(runtime.id)


def leftovers() -> list[str]:
    return [sid for sdk in _sdks for sid in sdk.cloud.live()]  # type: ignore[attr-defined]
