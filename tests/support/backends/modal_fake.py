"""ModalRuntime over the in-repo fake of the Modal SDK (local processes, no network)."""

from __future__ import annotations

import sys
import tempfile

from episodes.runtimes.base import Runtime
from episodes.types.runtime import ModalConfig

NAME = "modal-fake"
PYTHON = [sys.executable]

_sdks: list[object] = []  # every fake namespace handed out, for leftovers()


def skip_reason() -> str | None:
    return None


def make_runtime() -> Runtime:
    from episodes.runtimes.cloud.modal import ModalRuntime
    from tests.support.fakes.modal_fake import fake_sdk

    sdk = fake_sdk()
    _sdks.append(sdk)
    workdir = tempfile.mkdtemp(prefix="fake-modal-work-")  # the fake box removes it
    return ModalRuntime(ModalConfig(workdir=workdir), labels={"test": NAME}, sdk=sdk)


def kill_box(runtime) -> None:  # type: ignore[no-untyped-def]
    runtime.sandbox.simulate_death()


def leftovers() -> list[str]:
    return [sid for sdk in _sdks for sid in sdk.cloud.live()]  # type: ignore[attr-defined]
