"""The doctor checks every runtime of the backends table, and only those: a backend
added there is checked without the doctor naming it."""

from __future__ import annotations

import importlib.metadata

import pytest

from episodes.errors import RuntimeUnavailable
from episodes.ops.doctor import check_runtime, runtime_names
from episodes.runtimes import backends
from episodes.runtimes.backends import BACKENDS, Backend


def test_the_doctor_checks_every_runtime_of_the_table() -> None:
    assert runtime_names() == tuple(BACKENDS)
    assert {"subprocess", "docker", "modal", "prime", "e2b"} <= set(runtime_names())
    for name in runtime_names():
        check = check_runtime(name, required=False)
        assert check.name == f"runtime {name}"
        assert "no check for this runtime" not in check.detail, name


def test_e2b_without_a_key_says_what_to_set(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("e2b")
    version = importlib.metadata.version("e2b")
    monkeypatch.delenv("E2B_API_KEY", raising=False)
    check = check_runtime("e2b", required=True)
    assert check.failed
    assert (
        check.line() == f"✗ runtime e2b: e2b {version}, no E2B credentials — fix: set E2B_API_KEY"
    )
    monkeypatch.setenv("E2B_API_KEY", "e2b_not-a-real-key")
    check = check_runtime("e2b", required=True)
    assert check.ok and check.detail == f"e2b {version}, credentials set"
    assert "not-a-real-key" not in check.line()


def _unavailable() -> None:
    raise RuntimeUnavailable("no Acme credentials: set ACME_TOKEN")


def test_a_backend_added_to_the_table_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    acme = Backend(
        "episodes.runtimes.cloud.modal:ModalRuntime",
        load_sdk=f"{__name__}:_unavailable",
        sdk="pytest",  # an installed distribution, standing in for the SDK
    )
    monkeypatch.setitem(backends.BACKENDS, "acme", acme)
    assert "acme" in runtime_names()
    check = check_runtime("acme", required=False)
    assert not check.ok and not check.failed  # shown, not failing: nobody asked for it
    assert "no Acme credentials" in check.detail and check.fix == "set ACME_TOKEN"
    monkeypatch.setitem(
        backends.BACKENDS, "acme", Backend("x:Y", load_sdk="x:y", sdk="no-such-sdk")
    )
    check = check_runtime("acme", required=True)
    assert check.failed and check.fix == "pip install 'episodes[acme]'"
