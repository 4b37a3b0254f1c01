"""`harness.secrets` in specs, resolving them on the worker, scrubbing, `record:`."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from episodes.errors import SecretMissing, SpecError
from episodes.secret_values import Scrubber, resolve_secrets
from episodes.session.live import harness_env
from episodes.truncate import MARKER, NO_STORAGE_REASON, fit_result
from episodes.types.harness import EnvSecret, FileSecret
from episodes.types.results import StepOutcome, TurnRecord, TurnResult
from episodes.types.spec import SpecWarning, parse_spec


def _spec(harness: dict, **over: object):  # type: ignore[no-untyped-def]
    data = {
        "name": "s",
        "env": "script",
        "tasks": [{"id": "t"}],
        "harness": {"command": ["x"], **harness},
        **over,
    }
    return parse_spec(data, source="spec.yaml")


def test_secret_refs_are_told_apart_by_their_key(tmp_path: Path) -> None:
    s = _spec({"secrets": {"API_KEY": {"env": "HOST_KEY"}, "DB_PW": {"file": "/run/pw"}}})
    assert s.harness.secrets == {
        "API_KEY": EnvSecret(env="HOST_KEY"),
        "DB_PW": FileSecret(file="/run/pw"),
    }
    # Only the reference is in what travels to the workflow.
    assert "HOST_KEY" in s.model_dump_json() and s.record == "full"


@pytest.mark.parametrize(
    ("ref", "needle"),
    [
        ({"value": "x"}, "harness.secrets.K: a secret is {env: HOST_VARIABLE} or {file: PATH}"),
        ({"env": "A", "file": "b"}, "harness.secrets.K.env.file: unknown field"),
        ("inline-value", "harness.secrets.K: a secret is"),
    ],
)
def test_a_bad_secret_ref_is_one_line_naming_the_field_and_file(ref: object, needle: str) -> None:
    with pytest.raises(SpecError) as e:
        _spec({"secrets": {"K": ref}})
    msg = str(e.value)
    assert msg.startswith("spec.yaml: ") and "\n" not in msg and needle in msg
    assert "inline-value" not in msg


def test_a_secret_set_inline_too_is_refused() -> None:
    with pytest.raises(SpecError, match="API_KEY: set in both env and secrets"):
        _spec({"env": {"API_KEY": "v"}, "secrets": {"API_KEY": {"env": "H"}}})


@pytest.mark.parametrize("name", ["OPENAI_API_KEY", "GH_TOKEN", "APP_SECRET", "DB_PASSWORD_X"])
def test_a_secret_looking_inline_value_warns_naming_the_field_and_the_better_way(name: str) -> None:
    with pytest.warns(SpecWarning) as caught:
        _spec({"env": {name: "hunter22"}})
    [w] = caught
    text = str(w.message)
    assert f"spec.yaml: harness.env.{name}" in text and "harness.secrets" in text
    assert "hunter22" not in text


def test_ordinary_env_does_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _spec({"env": {"LOG_LEVEL": "debug", "KEYBOARD": "us"}})


def test_secrets_resolve_on_the_worker_from_env_and_file(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "pw").write_text("file-secret-value\n")
    monkeypatch.setenv("HOST_KEY", "env-secret-value")
    s = _spec({"secrets": {"API_KEY": {"env": "HOST_KEY"}, "PW": {"file": str(tmp_path / "pw")}}})
    assert resolve_secrets(s) == {"API_KEY": "env-secret-value", "PW": "file-secret-value"}
    assert harness_env(s)["API_KEY"] == "env-secret-value"


def test_a_missing_secret_names_the_secret_and_the_source_never_a_value(tmp_path: Path) -> None:
    s = _spec({"secrets": {"API_KEY": {"env": "NOPE_NOT_SET"}}})
    with pytest.raises(SecretMissing) as e:
        resolve_secrets(s, environ={})
    assert (
        str(e.value)
        == "harness.secrets.API_KEY: environment variable NOPE_NOT_SET is not set on the worker"
    )
    s = _spec({"secrets": {"PW": {"file": str(tmp_path / "absent")}}})
    with pytest.raises(
        SecretMissing, match=r"harness.secrets.PW: cannot read file .*absent on the worker"
    ):
        resolve_secrets(s)


def test_scrubber_masks_every_known_value_in_nested_values() -> None:
    scrub = Scrubber(["s3cr3t-value", "s3cr3t-value-longer", None, "ab"])
    rec = TurnRecord(
        turn=0,
        reply={"env": {"K": "s3cr3t-value-longer"}, "list": ["x s3cr3t-value y"]},
        error="stderr: K=s3cr3t-value",
        events=[{"s3cr3t-value": 1}],
    )
    out = scrub.model(rec)
    assert out.reply == {"env": {"K": "***"}, "list": ["x *** y"]}
    assert out.error == "stderr: K=***" and out.events == [{"***": 1}]
    assert scrub.text("ab") == "ab"  # too short to mask
    assert Scrubber().model(rec) is rec


def _result(reply: str) -> TurnResult:
    return TurnResult(record=TurnRecord(turn=0, reply=reply), observation=StepOutcome())


def test_record_full_keeps_a_big_turn_whole_when_storage_holds_it() -> None:
    big = _result("x" * 3_000_000)
    kept = fit_result(
        big, mode="full", max_value_bytes=1024, max_turn_bytes=4096, history_limit_bytes=None
    )
    assert kept is big


def test_record_full_without_storage_truncates_with_a_reason_and_warns(caplog) -> None:  # type: ignore[no-untyped-def]
    big = _result("x" * 3_000_000)
    out = fit_result(
        big,
        mode="full",
        max_value_bytes=256 * 1024,
        max_turn_bytes=1 << 20,
        history_limit_bytes=1536 * 1024,
    )
    assert out.record.reply[MARKER] is True and out.record.reply["reason"] == NO_STORAGE_REASON
    assert "set EPISODES_PAYLOADS_STORAGE" in caplog.text
    small = _result("x" * 1000)
    assert (
        fit_result(
            small,
            mode="full",
            max_value_bytes=1024,
            max_turn_bytes=4096,
            history_limit_bytes=1 << 20,
        )
        is small
    )


def test_record_truncate_always_caps() -> None:
    out = fit_result(
        _result("x" * 5000),
        mode="truncate",
        max_value_bytes=1024,
        max_turn_bytes=4096,
        history_limit_bytes=None,
    )
    assert out.record.reply[MARKER] is True and "reason" not in out.record.reply


NONE = {"runtime": {"type": "subprocess", "isolation": "none"}}
MODEL = {"base_url": "http://127.0.0.1:9/v1", "model": "m"}


@pytest.mark.parametrize(
    ("harness", "over", "named"),
    [
        ({**NONE, "secrets": {"TOKEN": {"env": "HOST_TOKEN"}}}, {}, "secrets"),
        (NONE, {"model": MODEL}, "model"),
    ],
)
def test_an_unsandboxed_harness_given_credentials_warns(harness, over, named) -> None:  # type: ignore[no-untyped-def]
    with pytest.warns(SpecWarning) as caught:
        _spec(harness, **over)
    [w] = caught
    text = str(w.message)
    assert f"spec.yaml: harness.runtime.isolation: none with {named}" in text
    assert "sandbox" in text


def test_the_sandbox_with_credentials_and_none_without_do_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _spec({"secrets": {"TOKEN": {"env": "HOST_TOKEN"}}}, model=MODEL)
        _spec(NONE)


def test_ro_paths_must_be_absolute() -> None:
    from episodes.errors import SpecError

    with pytest.raises(SpecError, match=r"harness.runtime.subprocess.ro_paths: .*not an absolute"):
        _spec({"runtime": {"type": "subprocess", "ro_paths": ["tests"]}})
