"""E2BRuntime over the in-repo fake of the e2b SDK (local processes, no network)."""

from __future__ import annotations

import atexit
import importlib.util
import shutil
import sys
import tempfile

from episodes.runtimes.base import Runtime
from episodes.types.runtime import E2BConfig

NAME = "e2b-fake"
PYTHON = [sys.executable]

_sdks: list[object] = []  # every fake namespace handed out, for leftovers()


def skip_reason() -> str | None:
    # The fake raises the SDK's own exceptions.
    if importlib.util.find_spec("e2b") is None:
        return "e2b is not installed (pip install 'episodes[e2b]')"
    return None


def make_runtime() -> Runtime:
    from episodes.runtimes.cloud.e2b import E2BRuntime
    from tests.support.fakes.e2b_fake import fake_sdk

    sdk = fake_sdk()
    _sdks.append(sdk)
    # The "VM" filesystem is the host's: a private workdir (made by start()), removed at exit.
    workdir = tempfile.mkdtemp(prefix="fake-e2b-work-")
    atexit.register(shutil.rmtree, workdir, True)
    config = E2BConfig(workdir=f"{workdir}/work", python=sys.executable)
    return E2BRuntime(config, labels={"test": NAME}, sdk=sdk)


def kill_box(runtime) -> None:  # type: ignore[no-untyped-def]
    runtime.sandbox.simulate_death()


def leftovers() -> list[str]:
    return [sid for sdk in _sdks for sid in sdk.cloud.live()]  # type: ignore[attr-defined]
